//! The revision the binaries report (`toolmark_build_info{revision}`): `TOOLMARK_REVISION` when
//! the build sets it (an image built without the repository's history), else the commit git
//! names for the checkout, else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=TOOLMARK_REVISION");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    let revision = std::env::var("TOOLMARK_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| {
            let out = Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TOOLMARK_BUILD_REVISION={revision}");
}
