//! Fuzzes the configuration file: loading any text never panics, and a refusal names a key
//! (the binaries print `config: <key>: <reason>` and exit 2). Files the text names (TLS
//! certificates) are not read: such inputs are skipped, as a path could name a device.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmark_config::{Overrides, Settings};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.contains("tls") {
        return;
    }
    if let Err(e) = Settings::load(text, std::iter::empty(), &Overrides::default()) {
        assert!(!e.to_string().is_empty());
        assert!(!e.reason.is_empty(), "{e:?}");
    }
});
