<?php
// Mints a Toolmark page token in your backend (PHP's standard library only): an HS256 JWT with
// the tenant's token secret, naming the user and conversation the page may serve.
//
//   TOOLMARK_TENANT=acme TOOLMARK_TOKEN_SECRET=... php mint.php <user> <conversation>
//
// Give the token to the page-side bridge; it opens
// wss://<gateway>/v1/tenants/<tenant>/page?token=<token>. In a Laravel app, return it from the
// route your page asks for its token.

function b64url(string $data): string
{
    return rtrim(strtr(base64_encode($data), '+/', '-_'), '=');
}

function toolmark_mint(string $tenant, string $secret, string $user, string $conversation, int $ttl = 3600): string
{
    $now = time();
    $header = ['alg' => 'HS256', 'typ' => 'JWT'];
    $claims = [
        'sub' => $user, 'cnv' => $conversation, 'aud' => $tenant,
        'iat' => $now, 'exp' => $now + $ttl, 'jti' => bin2hex(random_bytes(16)),
    ];
    $signingInput = b64url(json_encode($header)) . '.' . b64url(json_encode($claims));
    $signature = hash_hmac('sha256', $signingInput, $secret, true);
    return $signingInput . '.' . b64url($signature);
}

echo toolmark_mint(getenv('TOOLMARK_TENANT'), getenv('TOOLMARK_TOKEN_SECRET'), $argv[1], $argv[2]), "\n";
