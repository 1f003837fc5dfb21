package vmsnapshot

import (
	"strings"
	"testing"
	"time"
)

func mustSchedule(t *testing.T, expr, tz string) Schedule {
	t.Helper()
	s, err := ParseSchedule(expr, tz, "spec.schedule")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A daily run at 02:30 in Berlin: the spring change skips 02:30 (no run that day, as CronJob);
// the autumn change repeats it (one run, the first).
func TestScheduleOverDaylightSavingChanges(t *testing.T) {
	s := mustSchedule(t, "30 2 * * *", "Europe/Berlin")
	berlin := s.Location()
	var runs []string
	for at := s.Next(time.Date(2026, 3, 27, 12, 0, 0, 0, berlin)); at.Before(time.Date(2026, 3, 31, 12, 0, 0, 0, berlin)); at = s.Next(at) {
		runs = append(runs, at.Format("01-02 15:04 MST"))
	}
	// 29 March: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
	if got := strings.Join(runs, ", "); got != "03-28 02:30 CET, 03-30 02:30 CEST, 03-31 02:30 CEST" {
		t.Errorf("runs over the spring change: %s", got)
	}
	runs = nil
	for at := s.Next(time.Date(2026, 10, 24, 12, 0, 0, 0, berlin)); at.Before(time.Date(2026, 10, 27, 12, 0, 0, 0, berlin)); at = s.Next(at) {
		runs = append(runs, at.Format("01-02 15:04 MST"))
	}
	// 25 October: 03:00 CEST becomes 02:00 CET; 02:30 comes twice, and runs once.
	if got := strings.Join(runs, ", "); got != "10-25 02:30 CEST, 10-26 02:30 CET, 10-27 02:30 CET" {
		t.Errorf("runs over the autumn change: %s", got)
	}
	// An hourly schedule over the autumn change runs at each real hour, 02:00 twice.
	h := mustSchedule(t, "0 * * * *", "Europe/Berlin")
	var hours []string
	for at := time.Date(2026, 10, 25, 1, 30, 0, 0, berlin); len(hours) < 4; {
		at = h.Next(at)
		hours = append(hours, at.Format("15:04 MST"))
	}
	if got := strings.Join(hours, ", "); got != "02:00 CEST, 02:00 CET, 03:00 CET, 04:00 CET" {
		t.Errorf("hourly over the autumn change: %s", got)
	}
}

// Due on time, late both ways (Skip and RunOnce), with the runs missed while the operator was
// down counted and never run one by one.
func TestScheduleDueAndCatchUp(t *testing.T) {
	s := mustSchedule(t, "0 * * * *", "")
	last := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	deadline := 5 * time.Minute

	if d := s.Due(last, last.Add(30*time.Minute), deadline, CatchUpSkip); d.Run || !d.Scheduled.IsZero() || !d.Next.Equal(last.Add(time.Hour)) {
		t.Errorf("between runs: %+v; want nothing due, next 07:00", d)
	}
	if d := s.Due(last, last.Add(time.Hour+2*time.Second), deadline, CatchUpSkip); !d.Run || d.Late || !d.Scheduled.Equal(last.Add(time.Hour)) || d.Missed != 0 {
		t.Errorf("at 07:00:02: %+v; want the 07:00 run, on time", d)
	}
	// Down from 06:00 to 10:20: 07:00, 08:00 and 09:00 missed; 10:00 is 20 minutes late.
	now := last.Add(4*time.Hour + 20*time.Minute)
	d := s.Due(last, now, deadline, CatchUpSkip)
	if d.Run || !d.Scheduled.Equal(last.Add(4*time.Hour)) || d.Missed != 3 || !strings.Contains(d.Skipped, "missed by 20m0s, more than the starting deadline 5m0s, and catchUp is Skip") {
		t.Errorf("late with Skip: %+v", d)
	}
	d = s.Due(last, now, deadline, CatchUpRunOnce)
	if !d.Run || !d.Late || !d.Scheduled.Equal(last.Add(4*time.Hour)) || d.Missed != 3 || d.Skipped != "" {
		t.Errorf("late with RunOnce: %+v; want one late run of 10:00, three missed", d)
	}
	// Acted on 10:00: nothing more is due until 11:00.
	if d := s.Due(d.Scheduled, now, deadline, CatchUpRunOnce); d.Run || !d.Scheduled.IsZero() {
		t.Errorf("after the catch-up run: %+v; want nothing due", d)
	}
	// A minute schedule not acted on for a year: the newest time is found without walking
	// every minute, and the count says there were more than MaxMissed.
	m := mustSchedule(t, "* * * * *", "")
	now = last.Add(365*24*time.Hour + 30*time.Second)
	d = m.Due(last, now, deadline, CatchUpRunOnce)
	if !d.Run || !d.MissedMore || !d.Scheduled.Equal(now.Truncate(time.Minute)) {
		t.Errorf("a year late: %+v; want the run of %s, more than MaxMissed missed", d, now.Truncate(time.Minute))
	}
}

func TestScheduleRefusals(t *testing.T) {
	for _, c := range []struct{ cron, tz, want string }{
		{"", "", "spec.schedule.cron: empty"},
		{"0 2 * *", "", `spec.schedule.cron: "0 2 * *": expected exactly 5 fields`},
		{"61 * * * *", "", "spec.schedule.cron"},
		{"0 2 30 2 *", "", "never comes"},
		{"CRON_TZ=Europe/Berlin 0 2 * * *", "", "put it in spec.schedule.timeZone"},
		{"@every 1h", "", "an interval"},
		{"0 2 * * *", "Mars/Olympus", `spec.schedule.timeZone: unknown time zone "Mars/Olympus"`},
		{"0 2 * * *", "Local", `unknown time zone "Local"`},
	} {
		_, err := ParseSchedule(c.cron, c.tz, "spec.schedule")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSchedule(%q, %q): %v; want %q", c.cron, c.tz, err, c.want)
		}
	}
	for _, ok := range []string{"@daily", "@hourly", "*/15 * * * *", "0 3 * * 1-5", "0 0 1 * *"} {
		if _, err := ParseSchedule(ok, "America/New_York", "spec.schedule"); err != nil {
			t.Errorf("ParseSchedule(%q): %v", ok, err)
		}
	}
}

func FuzzParseSchedule(f *testing.F) {
	for _, seed := range []string{"0 2 * * *", "@daily", "*/5 1-3 * JAN MON", "0 0 31 2 *", "CRON_TZ=UTC * * * * *", "@every 1m", "? ? ? ? ?"} {
		f.Add(seed, "Europe/Berlin")
	}
	f.Fuzz(func(t *testing.T, expr, tz string) {
		s, err := ParseSchedule(expr, tz, "spec.schedule")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "spec.schedule.") {
				t.Fatalf("error %q does not name the field", err)
			}
			return
		}
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if next := s.Next(from); !next.After(from) {
			t.Fatalf("%q: next after %s is %s", expr, from, next)
		}
	})
}
