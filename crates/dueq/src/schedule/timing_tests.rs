//! Fire-time rules with a fake clock (plain timestamps), across DST dates of several zones.

use super::*;

fn ms(s: &str) -> u64 {
    s.parse::<Timestamp>().unwrap().as_millisecond() as u64
}

fn cron(pattern: &str, tz: Option<&str>) -> Grid {
    Grid::Cron {
        cron: Box::new(parse_cron(pattern).unwrap()),
        tz: zone(tz).unwrap(),
    }
}

fn ticks(g: &Grid, from: &str, n: usize) -> Vec<String> {
    g.upcoming(ms(from), n)
        .into_iter()
        .map(|t| Timestamp::from_millisecond(t as i64).unwrap().to_string())
        .collect()
}

/// Case C32: `0 30 2 * * *` in Europe/Berlin. 2026-03-29 has no 02:30 (02:00 CET jumps to
/// 03:00 CEST = 01:00Z): it fires once, at 01:00Z. 2026-10-25 has 02:30 twice (CEST, then
/// CET): it fires once, at the first (00:30Z).
#[test]
fn c32_berlin_spring_forward_and_fall_back() {
    let g = cron("0 30 2 * * *", Some("Europe/Berlin"));
    assert_eq!(
        ticks(&g, "2026-03-27T12:00:00Z", 4),
        [
            "2026-03-28T01:30:00Z", // CET, +01
            "2026-03-29T01:00:00Z", // gap: first instant after it (03:00 CEST)
            "2026-03-30T00:30:00Z", // CEST, +02
            "2026-03-31T00:30:00Z",
        ]
    );
    assert_eq!(
        ticks(&g, "2026-10-23T12:00:00Z", 4),
        [
            "2026-10-24T00:30:00Z", // CEST
            "2026-10-25T00:30:00Z", // overlap: first occurrence only (not 01:30Z)
            "2026-10-26T01:30:00Z", // CET
            "2026-10-27T01:30:00Z",
        ]
    );
    // asked from inside the repeated hour's second pass, it goes on to the next day
    assert_eq!(
        ticks(&g, "2026-10-25T01:10:00Z", 1),
        ["2026-10-26T01:30:00Z"]
    );
}

#[test]
fn no_zone_means_utc() {
    let g = cron("0 30 2 * * *", None);
    assert_eq!(
        ticks(&g, "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T02:30:00Z", "2026-03-30T02:30:00Z"]
    );
}

#[test]
fn new_york_gap_and_overlap() {
    // 2026-03-08 02:00 EST jumps to 03:00 EDT (07:00Z); 2026-11-01 01:00-02:00 happens twice
    let g = cron("0 2 * * *", Some("America/New_York"));
    assert_eq!(
        ticks(&g, "2026-03-07T12:00:00Z", 2),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"]
    );
    let g = cron("30 1 * * *", Some("America/New_York"));
    assert_eq!(
        ticks(&g, "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
}

#[test]
fn sydney_southern_hemisphere() {
    // 2026-10-04 02:00 AEST jumps to 03:00 AEDT (2026-10-03T16:00Z);
    // 2026-04-05 03:00 AEDT falls back to 02:00 AEST: 02:30 at +11 (15:30Z) and +10 (16:30Z)
    let g = cron("0 30 2 * * *", Some("Australia/Sydney"));
    assert_eq!(
        ticks(&g, "2026-10-03T00:00:00Z", 1),
        ["2026-10-03T16:00:00Z"]
    );
    assert_eq!(
        ticks(&g, "2026-04-04T00:00:00Z", 2),
        ["2026-04-04T15:30:00Z", "2026-04-05T16:30:00Z"]
    );
}

#[test]
fn lord_howe_half_hour_shift() {
    // 2026-10-04 02:00 +10:30 jumps to 02:30 +11: 02:15 does not exist, fires at 15:30Z
    let g = cron("15 2 * * *", Some("Australia/Lord_Howe"));
    assert_eq!(
        ticks(&g, "2026-10-03T00:00:00Z", 2),
        ["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"]
    );
}

#[test]
fn every_minute_through_a_gap_and_an_overlap() {
    let g = cron("* * * * *", Some("Europe/Berlin"));
    // spring forward: 01:59 CET (00:59Z) then 03:00 CEST (01:00Z), no tick repeated
    assert_eq!(
        ticks(&g, "2026-03-29T00:58:30Z", 3),
        [
            "2026-03-29T00:59:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:01:00Z"
        ]
    );
    // fall back: 02:59 CEST (00:59Z), then the repeated hour is not fired again: 03:00 CET
    assert_eq!(
        ticks(&g, "2026-10-25T00:58:30Z", 2),
        ["2026-10-25T00:59:00Z", "2026-10-25T02:00:00Z"]
    );
}

#[test]
fn every_second_through_a_gap_fires_once_at_its_end() {
    let g = cron("* * * * * *", Some("Europe/Berlin"));
    assert_eq!(
        ticks(&g, "2026-03-29T00:59:58.500Z", 3),
        [
            "2026-03-29T00:59:59Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:00:01Z"
        ]
    );
}

#[test]
fn every_ms_is_anchored_at_the_epoch() {
    let g = Grid::Every(1000);
    assert_eq!(g.next_after(1500), Some(2000));
    assert_eq!(g.next_after(2000), Some(3000));
    assert_eq!(g.upcoming(0, 3), [1000, 2000, 3000]);
    let g = Grid::Every(7);
    assert_eq!(g.next_after(13), Some(14));
}

#[test]
fn a_cron_that_never_matches_has_no_ticks() {
    let g = cron("0 0 30 2 *", None);
    assert_eq!(g.next_after(ms("2026-01-01T00:00:00Z")), None);
}

#[test]
fn patterns_need_five_or_six_fields() {
    assert!(parse_cron("61 * * * *").is_err());
    assert!(parse_cron("* * * *").is_err());
    assert!(parse_cron("0 0 0 1 1 * 2030").is_err());
    assert!(parse_cron("*/5 * * * *").is_ok());
    assert!(parse_cron("0 */5 * * * *").is_ok());
    assert!(zone(Some("Mars/Olympus")).is_err());
}

#[test]
fn a_refused_pattern_names_its_field() {
    let cases = [
        ("61 2 * * *", "minute field \"61\" (values 0 to 59)"),
        ("0 24 * * *", "hour field \"24\""),
        ("0 2 32 * *", "day of month field \"32\""),
        ("0 2 * 13 *", "month field \"13\""),
        ("0 2 * * mon-xx", "day of week field \"mon-xx\""),
        ("60 0 2 * * *", "second field \"60\""),
        ("0 61 2 * * *", "minute field \"61\""),
    ];
    for (pattern, want) in cases {
        let err = parse_cron(pattern).unwrap_err();
        assert!(err.starts_with(want), "{pattern:?}: {err}");
    }
    // the ranges the message gives are what croner takes
    for ok in [
        "59 23 31 12 7",
        "0 0 1 1 0",
        "0 0 * JAN-DEC SUN-SAT",
        "59 59 23 * * *",
    ] {
        assert!(parse_cron(ok).is_ok(), "{ok:?}");
    }
}

const B: u64 = 1_800_000_000_000; // a whole second, minute and hour

#[test]
fn plan_waits_for_the_tick() {
    assert_eq!(plan(&Grid::Every(1000), B, B - 1, 1000, false), None);
}

#[test]
fn plan_ticks_fires_ahead_inside_the_look_ahead_only() {
    let g = cron("0 0 2 * * *", Some("Europe/Berlin"));
    let tick = g.next_after(B).unwrap();
    // not yet inside the look-ahead, and not when none is allowed or no room is left
    assert_eq!(
        plan_ticks(&g, tick, tick - 1001, 1000, false, tick - 1, 10),
        None
    );
    assert_eq!(
        plan_ticks(&g, tick, tick - 500, 1000, false, tick - 500, 10),
        None
    );
    assert_eq!(plan_ticks(&g, tick, tick - 500, 1000, false, tick, 0), None);
    let s = plan_ticks(&g, tick, tick - 1000, 1000, false, tick, 10).unwrap();
    assert_eq!(
        s,
        Ticks {
            skipped: 0,
            fire: vec![tick],
            next: Some(tick + 86_400_000)
        }
    );
}

#[test]
fn plan_ticks_fires_a_frequent_schedule_ahead_up_to_its_room() {
    let g = Grid::Every(1000);
    // due at B, and ahead up to B + 10 000 but at most 4 ticks after now
    let s = plan_ticks(&g, B, B + 5, 1000, false, B + 10_005, 4).unwrap();
    assert_eq!(s.fire, vec![B, B + 1000, B + 2000, B + 3000, B + 4000]);
    assert_eq!(s.next, Some(B + 5000));
    // the look-ahead bounds it first
    let s = plan_ticks(&g, B + 1000, B, 1000, false, B + 2500, 10).unwrap();
    assert_eq!(s.fire, vec![B + 1000, B + 2000]);
    assert_eq!(s.next, Some(B + 3000));
    // missed ticks: counted, then the first tick inside the grace and the ones after it
    let s = plan_ticks(&g, B, B + 5_500, 1000, false, B + 7_500, 10).unwrap();
    assert_eq!(
        (s.skipped, s.fire.clone()),
        (5, vec![B + 5000, B + 6000, B + 7000])
    );
    let s = plan_ticks(&g, B, B + 5_500, 1000, true, B + 6_500, 10).unwrap();
    assert_eq!((s.skipped, s.fire), (0, vec![B + 4000, B + 5000, B + 6000]));
    // a schedule every ms far behind catches up in bounded steps
    let s = plan_ticks(&Grid::Every(1), B, B + 500, 1000, false, B + 500, 10).unwrap();
    assert_eq!(s.fire.len(), MAX_STEP_TICKS);
    assert_eq!(s.next, Some(B + MAX_STEP_TICKS as u64));
}

#[test]
fn plan_fires_a_due_tick_within_the_grace() {
    let s = plan(&Grid::Every(1000), B, B + 999, 1000, false).unwrap();
    assert_eq!(
        s,
        Step {
            skipped: 0,
            once_at: None,
            fire_at: Some(B),
            next: Some(B + 1000)
        }
    );
    // exactly at the grace's end it still counts as on time
    let s = plan(&Grid::Every(1000), B, B + 1000, 1000, false).unwrap();
    assert_eq!(s.fire_at, Some(B));
}

/// Case C31's arithmetic: now B+5.5 s with grace 1 s: the 5 ticks B .. B+4 s are missed
/// (more than 1 s late), B+5 s is on time.
#[test]
fn plan_misfire_skip_and_fire_once() {
    for g in [Grid::Every(1000), cron("* * * * * *", None)] {
        let s = plan(&g, B, B + 5_500, 1000, false).unwrap();
        assert_eq!(
            s,
            Step {
                skipped: 5,
                once_at: None,
                fire_at: Some(B + 5000),
                next: Some(B + 6000)
            },
            "{g:?}"
        );
        let s = plan(&g, B, B + 5_500, 1000, true).unwrap();
        assert_eq!(
            s,
            Step {
                skipped: 0,
                once_at: Some(B + 4000),
                fire_at: Some(B + 5000),
                next: Some(B + 6000)
            },
            "{g:?}"
        );
    }
    // B and B+10 s are both more than 1 s late at B+12 s; B+20 s is not due yet
    let s = plan(&Grid::Every(10_000), B, B + 12_000, 1000, false).unwrap();
    assert_eq!(
        s,
        Step {
            skipped: 2,
            once_at: None,
            fire_at: None,
            next: Some(B + 20_000)
        }
    );
}

#[test]
fn plan_stays_on_the_grid_after_a_long_downtime() {
    let day = 86_400_000;
    let s = plan(&Grid::Every(1000), B, B + day + 300, 1000, false).unwrap();
    assert_eq!(s.skipped, 86_400);
    assert_eq!(s.fire_at, Some(B + day));
    assert_eq!(s.next, Some(B + day + 1000));
}
