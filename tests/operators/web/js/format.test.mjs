// The page's formatting (operators/web/format.js): numbers, durations, times, data intervals, run ids.
import assert from "node:assert/strict";
import {test} from "node:test";

import {
  ago,
  count,
  duration,
  fixed,
  interval,
  shortRunId,
  shortValue,
  signed,
  timestamp,
} from "../../../../operators/web/format.js";

test("numbers: fixed digits, a real minus sign, thousands; a dash for what is no number", () => {
  assert.equal(fixed(0.91234), "0.9123");
  assert.equal(fixed(2.5, 2), "2.50");
  assert.equal(signed(-0.02), "−0.0200");
  assert.equal(signed(0.015, 3), "+0.015");
  assert.equal(count(12345.6), "12,346");
  assert.equal(shortValue(1200), "1,200");
  assert.equal(shortValue(0.123456), "0.123");
  for (const missing of [null, undefined, NaN, Infinity, "0.5"]) {
    assert.deepEqual([fixed(missing), signed(missing), count(missing), shortValue(missing)], ["—", "—", "—", "—"]);
  }
});

test("durations: seconds, then minutes and seconds, then hours and minutes", () => {
  assert.equal(duration(59.4), "59 s");
  assert.equal(duration(61), "1 min 01 s");
  assert.equal(duration(3 * 3600 + 5 * 60 + 59), "3 h 05 min");
  assert.equal(duration(null), "—");
  assert.equal(ago("2026-11-16T00:00:00Z", Date.parse("2026-11-16T00:02:30Z")), "2 min 30 s ago");
  assert.equal(ago("2026-11-16T00:00:10Z", Date.parse("2026-11-16T00:00:00Z")), "0 s ago"); // a clock ahead
});

test("times in UTC; a data interval's end without what it shares with its start", () => {
  assert.equal(timestamp("2026-11-16T03:04:05.678+00:00"), "2026-11-16 03:04:05 UTC");
  assert.equal(timestamp(null), "—");
  const days = (from, to) => interval({data_interval_start: from, data_interval_end: to});
  assert.equal(days("2026-11-16T00:00:00Z", "2026-11-17T00:00:00Z"), "2026-11-16 → 11-17");
  assert.equal(days("2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"), "2026-12-31 → 2027-01-01");
  assert.equal(days("2026-11-16T06:00:00Z", "2026-11-16T12:00:00Z"), "2026-11-16 06:00 → 12:00");
  assert.equal(days("2026-11-16T06:00:00Z", "2026-11-17T06:00:00Z"), "2026-11-16 06:00 → 11-17 06:00");
  assert.equal(days(null, "2026-11-17T00:00:00Z"), "—");
});

test("run ids: a date's run id by its date and time, a long one cut in the middle", () => {
  assert.equal(shortRunId("scheduled__2026-11-23T00:00:00+00:00"), "2026-11-23 00:00");
  assert.equal(shortRunId("manual__2026-11-23T10:15:30.123456Z"), "2026-11-23 10:15");
  assert.equal(shortRunId("backfill__2026-11-23T00:00:00+0000"), "2026-11-23 00:00");
  assert.equal(shortRunId("my_run"), "my_run");
  assert.equal(shortRunId("a_run_id_of_many_more_than_thirty_characters"), "a_run_id_of_many…y_characters");
});
