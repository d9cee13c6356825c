#!/usr/bin/env bash
# Prints a .env for docker-compose.yml: a random admin key, its hash, a random sealing key and
# PostgreSQL's password.
#   deploy/compose/env.sh > .env
# Keep .env private: the admin key creates and deletes tenants, the sealing key opens their
# stored secrets.
set -euo pipefail
key="tma_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
hash=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
echo "# The admin key (Authorization: Bearer …): $key"
echo "TOOLMARK_ADMIN_KEY=$key"
echo "TOOLMARK_ADMIN_KEY_HASHES=[\"sha256:$hash\"]"
echo "TOOLMARK_ENCRYPTION_KEY=base64:$(head -c 32 /dev/urandom | base64)"
echo "POSTGRES_PASSWORD=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')"
