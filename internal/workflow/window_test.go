package workflow_test

import (
	"strings"
	"testing"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

const windowField = "spec.maintenanceWindow"

func mustParseWindow(t testing.TB, w nwv1.MaintenanceWindow) workflow.Window {
	t.Helper()
	parsed, err := workflow.ParseWindow(&w, windowField)
	if err != nil {
		t.Fatalf("ParseWindow(%+v): %v", w, err)
	}
	return parsed
}

// windowLength is how long w is by the clock, computed here apart from the package.
func windowLength(t testing.TB, w nwv1.MaintenanceWindow) time.Duration {
	t.Helper()
	start, err := time.Parse("15:04", w.Start)
	if err != nil {
		t.Fatal(err)
	}
	end, err := time.Parse("15:04", w.End)
	if err != nil {
		t.Fatal(err)
	}
	if !end.After(start) {
		end = end.Add(24 * time.Hour)
	}
	return end.Sub(start)
}

func utc(month time.Month, day, hour, minute int) time.Time {
	return time.Date(2026, month, day, hour, minute, 0, 0, time.UTC)
}

func days(names ...string) []nwv1.Weekday {
	out := make([]nwv1.Weekday, len(names))
	for i, n := range names {
		out[i] = nwv1.Weekday(n)
	}
	return out
}

func TestParseWindowNamesTheFieldAndTheReason(t *testing.T) {
	valid := nwv1.MaintenanceWindow{Start: "22:00", End: "02:00", TimeZone: "Europe/Berlin"}
	for _, tc := range []struct {
		name   string
		change func(*nwv1.MaintenanceWindow)
		want   string
	}{
		{"unknown time zone", func(w *nwv1.MaintenanceWindow) { w.TimeZone = "Mars/Base" },
			`spec.maintenanceWindow.timeZone: unknown time zone "Mars/Base"`},
		{"the operator's own zone is no place", func(w *nwv1.MaintenanceWindow) { w.TimeZone = "Local" },
			`spec.maintenanceWindow.timeZone: unknown time zone "Local"`},
		{"a path is no time zone", func(w *nwv1.MaintenanceWindow) { w.TimeZone = "../../etc/passwd" },
			`spec.maintenanceWindow.timeZone: unknown time zone "../../etc/passwd"`},
		{"hour past the day", func(w *nwv1.MaintenanceWindow) { w.Start = "25:00" },
			`spec.maintenanceWindow.start: "25:00" is not a time of day as HH:MM`},
		{"midnight is 00:00, not 24:00", func(w *nwv1.MaintenanceWindow) { w.End = "24:00" },
			`spec.maintenanceWindow.end: "24:00" is not a time of day as HH:MM`},
		{"one-digit hour", func(w *nwv1.MaintenanceWindow) { w.Start = "9:00" },
			`spec.maintenanceWindow.start: "9:00" is not a time of day as HH:MM`},
		{"seconds", func(w *nwv1.MaintenanceWindow) { w.End = "02:00:00" },
			`spec.maintenanceWindow.end: "02:00:00" is not a time of day as HH:MM`},
		{"empty start", func(w *nwv1.MaintenanceWindow) { w.Start = "" },
			`spec.maintenanceWindow.start: "" is not a time of day as HH:MM`},
		{"minute past the hour", func(w *nwv1.MaintenanceWindow) { w.Start = "12:60" },
			`spec.maintenanceWindow.start: "12:60" is not a time of day as HH:MM`},
		{"no such day", func(w *nwv1.MaintenanceWindow) { w.Days = days("Monday", "Friday", "Funday") },
			`spec.maintenanceWindow.days[2]: "Funday" is not a day of the week`},
		{"days are named as the API names them", func(w *nwv1.MaintenanceWindow) { w.Days = days("monday") },
			`spec.maintenanceWindow.days[0]: "monday" is not a day of the week`},
		{"a day twice", func(w *nwv1.MaintenanceWindow) { w.Days = days("Monday", "Friday", "Monday") },
			`spec.maintenanceWindow.days[2]: "Monday" is listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := valid
			tc.change(&w)
			_, err := workflow.ParseWindow(&w, windowField)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := workflow.ParseWindow(nil, windowField); err == nil || err.Error() != "spec.maintenanceWindow: no maintenance window" {
		t.Fatalf("no window: got error %v", err)
	}
}

func TestWindowString(t *testing.T) {
	for _, tc := range []struct {
		window nwv1.MaintenanceWindow
		want   string
	}{
		{nwv1.MaintenanceWindow{Days: days("Saturday", "Monday"), Start: "22:00", End: "02:00", TimeZone: "Europe/Berlin"},
			"Mon,Sat 22:00-02:00 Europe/Berlin"},
		{nwv1.MaintenanceWindow{Start: "22:00", End: "02:00"}, "daily 22:00-02:00 UTC"},
		{nwv1.MaintenanceWindow{Days: days("Sunday"), Start: "09:05", End: "09:05", TimeZone: "UTC"},
			"Sun 09:05-09:05 UTC"},
	} {
		if got := mustParseWindow(t, tc.window).String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
	if got := (workflow.Window{}).String(); got != "daily 00:00-00:00 UTC" {
		t.Errorf("zero Window: String() = %q", got)
	}
}

func TestWindowAt(t *testing.T) {
	// The week of 2026-07-06, a Monday, has no clock change in any zone used here but
	// Pacific/Auckland, which is on standard time then.
	daily := nwv1.MaintenanceWindow{Start: "22:00", End: "02:00"}
	monSat := nwv1.MaintenanceWindow{Days: days("Monday", "Saturday"), Start: "22:00", End: "02:00"}
	friday := nwv1.MaintenanceWindow{Days: days("Friday"), Start: "22:00", End: "02:00"}
	wholeDay := nwv1.MaintenanceWindow{Days: days("Monday"), Start: "09:00", End: "09:00"}
	berlin := nwv1.MaintenanceWindow{Days: days("Monday", "Saturday"), Start: "22:00", End: "02:00", TimeZone: "Europe/Berlin"}

	// Europe/Berlin changes to summer time at 01:00 UTC on 2026-03-29 (02:00 CET becomes
	// 03:00 CEST) and back at 01:00 UTC on 2026-10-25 (03:00 CEST becomes 02:00 CET).
	inBerlin := func(start, end string) nwv1.MaintenanceWindow {
		return nwv1.MaintenanceWindow{Start: start, End: end, TimeZone: "Europe/Berlin"}
	}

	for _, tc := range []struct {
		name                string
		window              nwv1.MaintenanceWindow
		now                 time.Time
		open                bool
		wantOpens, wantEnds time.Time
	}{
		{"every day: open before midnight", daily, utc(7, 8, 23, 0), true, utc(7, 8, 22, 0), utc(7, 9, 2, 0)},
		{"every day: open after midnight", daily, utc(7, 9, 1, 0), true, utc(7, 8, 22, 0), utc(7, 9, 2, 0)},
		{"every day: closed until the evening", daily, utc(7, 8, 12, 0), false, utc(7, 8, 22, 0), utc(7, 9, 2, 0)},
		{"listed days only: Tuesday waits for Saturday", monSat, utc(7, 7, 23, 0), false, utc(7, 11, 22, 0), utc(7, 12, 2, 0)},
		{"listed days only: Saturday to Monday", monSat, utc(7, 12, 2, 0), false, utc(7, 13, 22, 0), utc(7, 14, 2, 0)},
		{"past midnight into a day not listed", friday, utc(7, 11, 1, 0), true, utc(7, 10, 22, 0), utc(7, 11, 2, 0)},
		{"the day not listed does not open itself", friday, utc(7, 11, 22, 30), false, utc(7, 17, 22, 0), utc(7, 18, 2, 0)},
		{"exactly at the start: open", friday, utc(7, 10, 22, 0), true, utc(7, 10, 22, 0), utc(7, 11, 2, 0)},
		{"a nanosecond before the start: closed", friday, utc(7, 10, 22, 0).Add(-time.Nanosecond), false, utc(7, 10, 22, 0), utc(7, 11, 2, 0)},
		{"a nanosecond before the end: open", friday, utc(7, 11, 2, 0).Add(-time.Nanosecond), true, utc(7, 10, 22, 0), utc(7, 11, 2, 0)},
		{"exactly at the end: closed, the next a week away", friday, utc(7, 11, 2, 0), false, utc(7, 17, 22, 0), utc(7, 18, 2, 0)},
		{"start equal to end: a whole day", wholeDay, utc(7, 7, 8, 59), true, utc(7, 6, 9, 0), utc(7, 7, 9, 0)},
		{"start equal to end: closed after the day", wholeDay, utc(7, 7, 9, 0), false, utc(7, 13, 9, 0), utc(7, 14, 9, 0)},
		{"no time zone is UTC", nwv1.MaintenanceWindow{Start: "10:00", End: "11:00", TimeZone: ""}, utc(7, 6, 10, 30), true, utc(7, 6, 10, 0), utc(7, 6, 11, 0)},

		{"the zone's clock: open at 22:30 CEST", berlin, utc(7, 6, 20, 30), true, utc(7, 6, 20, 0), utc(7, 7, 0, 0)},
		{"the zone's clock: closed at 21:59 CEST", berlin, utc(7, 6, 19, 59), false, utc(7, 6, 20, 0), utc(7, 7, 0, 0)},
		{"the zone's clock: closed at 22:30 UTC, 00:30 CEST Tuesday", berlin, utc(7, 7, 22, 30), false, utc(7, 11, 20, 0), utc(7, 12, 0, 0)},
		{"the zone's calendar: Monday in Auckland is Sunday in UTC",
			nwv1.MaintenanceWindow{Days: days("Monday"), Start: "09:00", End: "10:00", TimeZone: "Pacific/Auckland"},
			utc(7, 5, 21, 30), true, utc(7, 5, 21, 0), utc(7, 5, 22, 0)},
		{"a zone half an hour off the hour",
			nwv1.MaintenanceWindow{Start: "02:00", End: "03:00", TimeZone: "Asia/Kolkata"},
			utc(7, 6, 20, 0), false, utc(7, 6, 20, 30), utc(7, 6, 21, 30)},
		{"a zone behind UTC, across UTC's midnight",
			nwv1.MaintenanceWindow{Days: days("Friday"), Start: "20:00", End: "23:00", TimeZone: "America/New_York"},
			utc(7, 11, 1, 0), true, utc(7, 11, 0, 0), utc(7, 11, 3, 0)},

		{"spring: a skipped start opens at the jump", inBerlin("02:30", "04:00"), utc(3, 29, 0, 45), false, utc(3, 29, 1, 0), utc(3, 29, 2, 0)},
		{"spring: open from the jump", inBerlin("02:30", "04:00"), utc(3, 29, 1, 0), true, utc(3, 29, 1, 0), utc(3, 29, 2, 0)},
		{"spring: a skipped end closes at the jump", inBerlin("01:30", "02:30"), utc(3, 29, 0, 45), true, utc(3, 29, 0, 30), utc(3, 29, 1, 0)},
		{"spring: a window skipped whole keeps its length", inBerlin("02:30", "02:45"), utc(3, 29, 0, 59), false, utc(3, 29, 1, 0), utc(3, 29, 1, 15)},
		{"spring: the day before, on CET", inBerlin("02:30", "02:45"), utc(3, 28, 1, 0), false, utc(3, 28, 1, 30), utc(3, 28, 1, 45)},
		{"spring: the day after, on CEST", inBerlin("02:30", "02:45"), utc(3, 29, 1, 15), false, utc(3, 30, 0, 30), utc(3, 30, 0, 45)},
		{"autumn: a start shown twice opens the first time", inBerlin("02:30", "03:30"), utc(10, 25, 0, 30), true, utc(10, 25, 0, 30), utc(10, 25, 2, 30)},
		{"autumn: and stays open an hour longer", inBerlin("02:30", "03:30"), utc(10, 25, 1, 45), true, utc(10, 25, 0, 30), utc(10, 25, 2, 30)},
		{"autumn: open the first time the clock shows it", inBerlin("02:30", "02:45"), utc(10, 25, 0, 40), true, utc(10, 25, 0, 30), utc(10, 25, 0, 45)},
		{"autumn: not again the second time", inBerlin("02:30", "02:45"), utc(10, 25, 1, 35), false, utc(10, 26, 1, 30), utc(10, 26, 1, 45)},
		{"autumn: an end shown twice closes the first time", inBerlin("01:00", "02:30"), utc(10, 25, 0, 0), true, utc(10, 24, 23, 0), utc(10, 25, 0, 30)},
		{"autumn: across midnight into the change", inBerlin("22:00", "03:30"), utc(10, 25, 1, 30), true, utc(10, 24, 20, 0), utc(10, 25, 2, 30)},

		// Antarctica/Troll goes back two hours, from +02 to +00 at 01:00 UTC: by the clock
		// the window would last five hours; it closes after four.
		{"a clock going back two hours adds one",
			nwv1.MaintenanceWindow{Start: "00:30", End: "03:30", TimeZone: "Antarctica/Troll"},
			utc(10, 25, 2, 0), true, utc(10, 24, 22, 30), utc(10, 25, 2, 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open, opens, closes := mustParseWindow(t, tc.window).At(tc.now)
			if open != tc.open || !opens.Equal(tc.wantOpens) || !closes.Equal(tc.wantEnds) {
				t.Fatalf("At(%s) = %v, %s, %s; want %v, %s, %s", tc.now.UTC(), open, opens.UTC(), closes.UTC(),
					tc.open, tc.wantOpens.UTC(), tc.wantEnds.UTC())
			}
		})
	}
}

// Around both clock changes of 2026 in Europe/Berlin, every window made of these times
// opens and closes consistently minute by minute, and no opening lasts longer than the
// window's length plus one hour.
func TestWindowAcrossClockChanges(t *testing.T) {
	times := []string{"00:00", "01:00", "01:30", "02:00", "02:30", "02:45", "03:00", "03:30", "22:00"}
	weekends := []time.Time{utc(3, 27, 0, 0), utc(10, 23, 0, 0)}
	for _, start := range times {
		for _, end := range times {
			spec := nwv1.MaintenanceWindow{Start: start, End: end, TimeZone: "Europe/Berlin"}
			window := mustParseWindow(t, spec)
			longest := windowLength(t, spec) + time.Hour
			for _, from := range weekends {
				checkMinuteByMinute(t, window, longest, from, from.Add(4*24*time.Hour))
			}
		}
	}
}

// checkMinuteByMinute asks window at every minute from from to to and fails t when an
// answer contradicts the one before, or an opening lasts longer than longest.
func checkMinuteByMinute(t *testing.T, window workflow.Window, longest time.Duration, from, to time.Time) {
	t.Helper()
	var lastOpen bool
	var lastOpens, lastCloses time.Time
	for now := from; now.Before(to); now = now.Add(time.Minute) {
		open, opens, closes := window.At(now)
		if !closes.After(opens) || closes.Sub(opens) > longest {
			t.Fatalf("%s at %s: opening %s to %s lasts %s, at most %s", window, now, opens, closes, closes.Sub(opens), longest)
		}
		if open && (now.Before(opens) || !now.Before(closes)) {
			t.Fatalf("%s at %s: open, but the opening is %s to %s", window, now, opens, closes)
		}
		if !open && !opens.After(now) {
			t.Fatalf("%s at %s: closed, but the next opening is at %s", window, now, opens)
		}
		if now != from {
			switch {
			case lastOpen && now.Before(lastCloses) && (!open || !closes.Equal(lastCloses)):
				t.Fatalf("%s at %s: open until %s a minute ago, now %v until %s", window, now, lastCloses, open, closes)
			case !lastOpen && now.Before(lastOpens) && (open || !opens.Equal(lastOpens)):
				t.Fatalf("%s at %s: to open at %s a minute ago, now %v at %s", window, now, lastOpens, open, opens)
			case !lastOpen && !now.Before(lastOpens) && now.Before(lastCloses) && !open:
				t.Fatalf("%s at %s: to be open from %s to %s, but closed", window, now, lastOpens, lastCloses)
			}
		}
		lastOpen, lastOpens, lastCloses = open, opens, closes
	}
}

// The zero Window is open at all times.
func TestZeroWindowIsAlwaysOpen(t *testing.T) {
	for _, now := range []time.Time{utc(1, 1, 0, 0), utc(7, 6, 12, 34), utc(12, 31, 23, 59)} {
		if open, _, closes := (workflow.Window{}).At(now); !open || !closes.After(now) {
			t.Errorf("At(%s) = %v until %s", now, open, closes)
		}
	}
}

func FuzzParseWindow(f *testing.F) {
	for _, seed := range []struct {
		start, end, timeZone, days string
		instant                    int64
	}{
		{"22:00", "02:00", "Europe/Berlin", "Monday,Saturday", utc(7, 6, 20, 30).Unix()},
		{"02:30", "02:45", "Europe/Berlin", "Sunday", utc(3, 22, 1, 45).Unix()},
		{"02:30", "03:30", "Europe/Berlin", "", utc(10, 25, 1, 45).Unix()},
		{"00:30", "03:30", "Antarctica/Troll", "", utc(10, 25, 2, 0).Unix()},
		{"02:00", "02:00", "Australia/Lord_Howe", "Sunday", 0},
		{"09:00", "10:00", "Pacific/Apia", "Friday", -1},
		{"23:59", "00:00", "", "Sunday,Saturday", 1 << 40},
		{"25:00", "02:00", "Mars/Base", "Funday", 7},
		{"10:00", "11:00", "Local", "Monday,Monday", 9},
	} {
		f.Add(seed.start, seed.end, seed.timeZone, seed.days, seed.instant)
	}
	// The instants are spread over this century, where every zone's rules are known.
	century := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	const centurySeconds = 100 * 365 * 24 * 60 * 60

	f.Fuzz(func(t *testing.T, start, end, timeZone, dayList string, instant int64) {
		spec := nwv1.MaintenanceWindow{Start: start, End: end, TimeZone: timeZone}
		if dayList != "" {
			for _, d := range strings.Split(dayList, ",") {
				spec.Days = append(spec.Days, nwv1.Weekday(d))
			}
		}
		window, err := workflow.ParseWindow(&spec, windowField)
		if err != nil {
			if !strings.HasPrefix(err.Error(), windowField+".") {
				t.Fatalf("error %q does not name the field", err)
			}
			return
		}
		_ = window.String()
		longest := windowLength(t, spec) + time.Hour

		seconds := (instant%centurySeconds + centurySeconds) % centurySeconds
		first := century.Add(time.Duration(seconds)*time.Second + time.Duration(instant%1e9))
		for _, now := range []time.Time{first, first.Add(time.Hour), first.Add(13*time.Hour + 17*time.Minute), first.Add(3 * 24 * time.Hour)} {
			open, opens, closes := window.At(now)
			if !closes.After(opens) || closes.Sub(opens) > longest {
				t.Fatalf("%s at %s: opening %s to %s, longer than %s", window, now, opens, closes, longest)
			}
			if open {
				if now.Before(opens) || !closes.After(now) {
					t.Fatalf("%s at %s: open, opening %s to %s", window, now, opens, closes)
				}
				continue
			}
			if !opens.After(now) || opens.Sub(now) > 8*24*time.Hour {
				t.Fatalf("%s at %s: closed, next opening at %s", window, now, opens)
			}
			if open, _, closesThen := window.At(opens); !open || !closesThen.Equal(closes) {
				t.Fatalf("%s at %s: said to open then until %s, but At says %v until %s", window, opens, closes, open, closesThen)
			}
		}
	})
}
