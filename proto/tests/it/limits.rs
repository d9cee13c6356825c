//! A 100 MB frame and a 100,000-deep frame are refused before any value tree is built, in
//! bounded memory.

use toolmark_proto::{DecodeError, Direction, Limits, RejectReason, decode};

use crate::ALLOC;

/// Decodes `raw` and returns the error and the bytes allocated (in total, not net) while it
/// ran. Other test threads can only inflate the count, never hide an allocation.
fn refused_with_heap(raw: &[u8], limits: &Limits) -> (DecodeError, usize) {
    let region = stats_alloc::Region::new(ALLOC);
    let err = decode(raw, Direction::ToAgent, limits).expect_err("must be refused");
    (err, region.change().bytes_allocated)
}

#[test]
fn hundred_megabytes_is_refused_without_copying() {
    let mut raw = Vec::with_capacity(100 * 1024 * 1024);
    raw.extend_from_slice(br#"{"protocol":1,"type":"result","clientId":"c","id":"i","result":{"status":"ok","data":""#);
    raw.resize(100 * 1024 * 1024 - 3, b'x');
    raw.extend_from_slice(br#""}}"#);
    let (err, grew) = refused_with_heap(&raw, &Limits::default());
    assert_eq!(
        err,
        DecodeError::TooLarge {
            size: raw.len(),
            limit: 1_048_576
        }
    );
    assert_eq!(err.reason(), RejectReason::TooLarge);
    assert!(
        grew < 1024 * 1024,
        "decode allocated {grew} bytes for a refused frame"
    );
}

#[test]
fn hundred_thousand_levels_are_refused_in_bounded_memory() {
    // Allowed by size (200,000 bytes) so the depth scan, not the size check, must refuse it.
    let raw = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let (err, grew) = refused_with_heap(raw.as_bytes(), &Limits::default());
    assert_eq!(err, DecodeError::TooDeep { limit: 64 });
    assert!(
        grew < 1024 * 1024,
        "decode allocated {grew} bytes for a refused frame"
    );
    // The same with objects, nested inside a message's input.
    let deep = format!(
        r#"{{"protocol":1,"type":"result","clientId":"c","id":"i","result":{{"status":"ok","data":{}1{}}}}}"#,
        r#"{"a":"#.repeat(100_000),
        "}".repeat(100_000)
    );
    assert_eq!(
        refused_with_heap(deep.as_bytes(), &Limits::default())
            .0
            .reason(),
        RejectReason::TooDeep
    );
}

fn result_with_data_depth(levels: usize) -> String {
    // The message object is level 1, `result` level 2, so data adds `levels - 2`.
    let inner = levels - 2;
    format!(
        r#"{{"protocol":1,"type":"result","clientId":"c","id":"i","result":{{"status":"ok","data":{}{}}}}}"#,
        "[".repeat(inner),
        "]".repeat(inner)
    )
}

#[test]
fn depth_64_is_accepted_and_65_refused() {
    let ok = result_with_data_depth(64);
    assert!(decode(ok.as_bytes(), Direction::ToAgent, &Limits::default()).is_ok());
    let bad = result_with_data_depth(65);
    let err = decode(bad.as_bytes(), Direction::ToAgent, &Limits::default()).unwrap_err();
    assert_eq!(err.reason(), RejectReason::TooDeep);
}

#[test]
fn size_limit_is_exact_and_configurable() {
    let base = r#"{"protocol":1,"type":"changed","clientId":"c","rev":1}"#;
    let exact = Limits::with_max_bytes(base.len());
    assert!(decode(base.as_bytes(), Direction::ToAgent, &exact).is_ok());
    let one_less = Limits::with_max_bytes(base.len() - 1);
    let err = decode(base.as_bytes(), Direction::ToAgent, &one_less).unwrap_err();
    assert_eq!(
        err,
        DecodeError::TooLarge {
            size: base.len(),
            limit: base.len() - 1
        }
    );
    // The default limit: 1 MiB passes, 1 MiB + 1 byte does not.
    let pad = |total: usize| {
        let head = r#"{"protocol":1,"type":"result","clientId":"c","id":"i","result":{"status":"ok","data":""#;
        let tail = r#""}}"#;
        format!(
            "{head}{}{tail}",
            "x".repeat(total - head.len() - tail.len())
        )
    };
    assert!(
        decode(
            pad(1_048_576).as_bytes(),
            Direction::ToAgent,
            &Limits::default()
        )
        .is_ok()
    );
    let err = decode(
        pad(1_048_577).as_bytes(),
        Direction::ToAgent,
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), RejectReason::TooLarge);
}
