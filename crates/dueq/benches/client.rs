//! Criterion benchmarks of the client-side hot paths: building and decoding task records and
//! computing backoff delays. The Redis side is measured by `dueq bench`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dueq::protocol::record::{Record, spec};
use dueq::{Backoff, TaskOptions};

fn records(c: &mut Criterion) {
    let payload = vec![b'x'; 100];
    let options = TaskOptions::new().max_attempts(5).lease_ms(30_000);
    c.bench_function("record spec, 100-byte payload, keyed", |b| {
        b.iter(|| {
            spec(
                black_box(&options),
                black_box("order:10001:cancel"),
                black_box(&payload),
            )
        })
    });
    let mut raw = spec(&options, "order:10001:cancel", &payload);
    raw.extend(&1_764_455_000_871u64.to_le_bytes()[..6]);
    raw.extend(&1_764_455_000_000u64.to_le_bytes()[..6]);
    c.bench_function("record decode, 100-byte payload, keyed", |b| {
        b.iter(|| Record::decode(black_box(raw.clone())))
    });
}

fn backoff(c: &mut Criterion) {
    let b = Backoff::default();
    c.bench_function("backoff delay_ms", |bn| {
        bn.iter(|| b.delay_ms(black_box(17)))
    });
    c.bench_function("backoff table_ms (sent with nack/recover)", |bn| {
        bn.iter(|| b.table_ms())
    });
}

criterion_group!(benches, records, backoff);
criterion_main!(benches);
