package vmsnapshot

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// history is a snapshot every hour from start for n hours, each good unless failed says
// otherwise (by the hour's index), named by its time.
func history(start time.Time, n int, failed func(i int) bool) []Snapshot {
	var out []Snapshot
	for i := range n {
		t := start.Add(time.Duration(i) * time.Hour)
		s := Snapshot{Name: t.UTC().Format("0102-1504"), Created: t, State: Good}
		if failed != nil && failed(i) {
			s.State = Failed
		}
		out = append(out, s)
	}
	return out
}

func kept(vs []Verdict) []string {
	var out []string
	for _, v := range vs {
		if v.Keep {
			out = append(out, v.Name)
		}
	}
	return out
}

func goodKept(vs []Verdict) int {
	n := 0
	for _, v := range vs {
		if v.Keep && v.State == Good {
			n++
		}
	}
	return n
}

// Three weeks of hourly snapshots, on a fake clock in Europe/Berlin: keepLast 3, keepDaily 7
// and keepWeekly 4 keep the last three, the newest of each of the last seven days and the
// newest of each of the last four ISO weeks, no more; each kept one says which rule keeps it.
func TestRetentionAcrossDays(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// Monday 2 November 2026, 00:30 in Berlin (CET), for 21 days.
	start := time.Date(2026, 11, 2, 0, 30, 0, 0, berlin)
	snaps := history(start, 21*24, nil)
	now := snaps[len(snaps)-1].Created.Add(10 * time.Minute) // Sunday 22 November, 23:40
	r := Retention{KeepLast: 3, KeepDaily: 7, KeepWeekly: 4}
	got := kept(r.Plan(snaps, now, berlin))
	name := func(day, hour int) string {
		return time.Date(2026, 11, day, hour, 30, 0, 0, berlin).UTC().Format("0102-1504")
	}
	// The last three (22 Nov 21:30, 22:30, 23:30); the newest of each day 16–22 November
	// (23:30 each; the 22nd's is the newest overall); the newest of each ISO week: weeks 47
	// (16–22, its newest the 22nd's), 46 (9–15: the 15th), 45 (2–8: the 8th) — three weeks
	// have snapshots, so keepWeekly 4 keeps three.
	want := []string{name(22, 23), name(22, 22), name(22, 21), name(21, 23), name(20, 23), name(19, 23), name(18, 23),
		name(17, 23), name(16, 23), name(15, 23), name(8, 23)}
	if !slices.Equal(got, want) {
		t.Errorf("kept %v\nwant %v", got, want)
	}
	for _, v := range r.Plan(snaps, now, berlin) {
		if v.Keep && v.Reason == "" || !v.Keep && v.Reason != "no retention rule keeps it" {
			t.Errorf("%s: keep %t, reason %q", v.Name, v.Keep, v.Reason)
		}
	}

	// keepHourly 5: the newest of each of the last five hours, with nothing else.
	if got := kept(Retention{KeepHourly: 5}.Plan(snaps, now, berlin)); !slices.Equal(got, []string{name(22, 23), name(22, 22), name(22, 21), name(22, 20), name(22, 19)}) {
		t.Errorf("keepHourly 5 kept %v", got)
	}
	// maxAge 3 days drops the older ones the rules kept; the newest good stays whatever.
	got = kept(Retention{KeepDaily: 7, MaxAge: 72 * time.Hour}.Plan(snaps, now, berlin))
	if !slices.Equal(got, []string{name(22, 23), name(21, 23), name(20, 23)}) {
		t.Errorf("keepDaily 7 with maxAge 72h kept %v", got)
	}
}

// A day on which the clocks go back: the hour repeated is one hourly bucket, and the day is
// one daily bucket of 25 hours.
func TestRetentionOverADaylightSavingChange(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 25 October 2026: 03:00 CEST becomes 02:00 CET. Hourly snapshots from 00:15 CEST.
	start := time.Date(2026, 10, 25, 0, 15, 0, 0, berlin)
	snaps := history(start, 26, nil) // the 25 hours of the 25th, and 00:15 on the 26th
	now := snaps[len(snaps)-1].Created
	r := Retention{KeepDaily: 2}
	got := kept(r.Plan(snaps, now, berlin))
	// The 26th's one snapshot, and the newest of the 25th (23:15 CET).
	if want := []string{snaps[25].Name, snaps[24].Name}; !slices.Equal(got, want) {
		t.Errorf("keepDaily 2 kept %v, want %v", got, want)
	}
	// Local hour 02 came twice (CEST, then CET): one bucket, whose newest is kept. keepHourly
	// 24 keeps the 24 newest of the 25 local hours: not 00:15 CEST (the 25th bucket), nor the
	// first 02:15 (CEST, in the bucket of the second).
	r = Retention{KeepHourly: 24}
	got = kept(r.Plan(snaps, now, berlin))
	if len(got) != 24 || slices.Contains(got, snaps[0].Name) || slices.Contains(got, snaps[2].Name) || !slices.Contains(got, snaps[3].Name) {
		t.Errorf("keepHourly 24 over the change kept %d: %v; want 24, not %s (00:15 CEST) nor %s (02:15 CEST)", len(got), got, snaps[0].Name, snaps[2].Name)
	}
	if snaps[2].Created.In(berlin).Format("15:04 MST") != "02:15 CEST" || snaps[3].Created.In(berlin).Format("15:04 MST") != "02:15 CET" {
		t.Fatalf("the change should repeat 02:15: %s, %s", snaps[2].Created.In(berlin), snaps[3].Created.In(berlin))
	}
}

// A burst of failures never deletes the last good snapshot, nor goes below minGood; the failed
// ones are kept as evidence until a newer good one exists, then deleted.
func TestRetentionFailureBurst(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// 48 hours: good for the first 10, then failing for the rest.
	snaps := history(start, 48, func(i int) bool { return i >= 10 })
	now := start.Add(48 * time.Hour)
	r := Retention{KeepLast: 3, MaxAge: 6 * time.Hour, MinGood: 2}
	vs := r.Plan(snaps, now, time.UTC)
	if n := goodKept(vs); n != 2 {
		t.Errorf("%d good kept in a failure burst; want minGood 2 (maxAge passed for all of them)", n)
	}
	if got := kept(vs); !slices.Contains(got, snaps[9].Name) || !slices.Contains(got, snaps[8].Name) {
		t.Errorf("kept %v; want the two newest good, %s and %s", got, snaps[9].Name, snaps[8].Name)
	}
	failedKept := 0
	for _, v := range vs {
		switch {
		case v.State == Failed && v.Keep:
			failedKept++
			if v.Created.Before(snaps[len(snaps)-MaxFailedKept].Created) {
				t.Errorf("failed %s kept: only the newest %d failures are", v.Name, MaxFailedKept)
			}
		case v.State == Failed && v.Reason != "failed; the 3 newer failures are kept as evidence":
			t.Errorf("failed %s deleted: %s", v.Name, v.Reason)
		}
		if v.Name == snaps[9].Name && v.Reason != "the newest good snapshot" {
			t.Errorf("the newest good snapshot's reason %q", v.Reason)
		}
	}
	if failedKept != MaxFailedKept {
		t.Errorf("%d failures kept as evidence; want the newest %d", failedKept, MaxFailedKept)
	}
	// minGood 0: the newest good one still stays.
	if n := goodKept(Retention{KeepLast: 3, MaxAge: time.Hour}.Plan(snaps, now, time.UTC)); n != 1 {
		t.Errorf("%d good kept with maxAge passed and no minGood; want the newest good one", n)
	}

	// A good run after the burst: every failed one goes, the newest good is the new one.
	snaps = append(snaps, Snapshot{Name: "recovered", Created: now, State: Good})
	vs = r.Plan(snaps, now.Add(time.Minute), time.UTC)
	for _, v := range vs {
		if v.State == Failed && (v.Keep || !strings.HasPrefix(v.Reason, "failed; a newer good snapshot exists")) {
			t.Errorf("failed %s: keep %t (%s) once a newer good one exists", v.Name, v.Keep, v.Reason)
		}
	}
	if got := kept(vs); !slices.Equal(got, []string{"recovered", snaps[9].Name}) {
		t.Errorf("kept %v after the recovery; want the new one and one more for minGood 2", got)
	}
}

// In-progress snapshots are never deleted, nor counted.
func TestRetentionInProgress(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	snaps := history(start, 5, nil)
	snaps = append(snaps, Snapshot{Name: "running", Created: start.Add(5 * time.Hour), State: InProgress})
	vs := Retention{KeepLast: 1}.Plan(snaps, start.Add(6*time.Hour), time.UTC)
	if got := kept(vs); !slices.Equal(got, []string{"running", snaps[4].Name}) {
		t.Errorf("kept %v; want the one in progress and the newest good", got)
	}
}

func BenchmarkRetention10000(b *testing.B) {
	snaps := history(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 10_000, func(i int) bool { return i%17 == 0 })
	now := snaps[len(snaps)-1].Created
	r := Retention{KeepLast: 24, KeepHourly: 48, KeepDaily: 30, KeepWeekly: 52, MaxAge: 400 * 24 * time.Hour, MinGood: 3}
	for b.Loop() {
		_ = r.Plan(snaps, now, time.UTC)
	}
}

func ExampleRetention_Plan() {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	snaps := []Snapshot{
		{Name: "a", Created: start, State: Good},
		{Name: "b", Created: start.Add(time.Hour), State: Failed},
		{Name: "c", Created: start.Add(2 * time.Hour), State: Good},
		{Name: "d", Created: start.Add(3 * time.Hour), State: Failed},
	}
	for _, v := range (Retention{KeepLast: 1}).Plan(snaps, start.Add(4*time.Hour), time.UTC) {
		fmt.Printf("%s %s keep=%t: %s\n", v.Name, v.State, v.Keep, v.Reason)
	}
	// Output:
	// d Failed keep=true: failed; kept as evidence until a newer good snapshot exists
	// c Good keep=true: the newest good snapshot
	// b Failed keep=false: failed; a newer good snapshot exists (2026-11-01T02:00:00Z)
	// a Good keep=false: no retention rule keeps it
}

// At the cap a run deletes first what the new snapshot pushes out, oldest first; never the
// newest good one, nor below minGood; not after a failure; and it waits while one is in
// progress.
func TestBeforeRun(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := start.Add(3 * time.Hour)
	snaps := history(start, 3, nil) // 00:00, 01:00, 02:00, all good
	names := func(vs []Verdict) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Name)
		}
		return out
	}
	if p := (Retention{KeepLast: 4}).BeforeRun(snaps, now, time.UTC); p.Wait != "" || len(p.Delete) != 0 {
		t.Errorf("below the cap: %+v; want a plain run", p)
	}
	if p := (Retention{KeepLast: 3}).BeforeRun(snaps, now, time.UTC); p.Wait != "" || !slices.Equal(names(p.Delete), []string{snaps[0].Name}) {
		t.Errorf("at the cap of 3: %+v; want the oldest deleted first", p)
	}
	// keepLast 1: the new snapshot would push out the only good one, which is kept until the
	// new one is good.
	if p := (Retention{KeepLast: 1}).BeforeRun(snaps[2:], now, time.UTC); len(p.Delete) != 0 {
		t.Errorf("keepLast 1: %+v; want the only good snapshot kept until the new one is good", p)
	}
	// minGood 3 over keepLast 2: the floor holds.
	if p := (Retention{KeepLast: 2, MinGood: 3}).BeforeRun(snaps, now, time.UTC); len(p.Delete) != 0 {
		t.Errorf("minGood 3: %+v; want nothing deleted beforehand", p)
	}
	// After a failure the run creates without deleting.
	failed := append(slices.Clone(snaps), Snapshot{Name: "failed", Created: start.Add(150 * time.Minute), State: Failed})
	if p := (Retention{KeepLast: 3}).BeforeRun(failed, now, time.UTC); p.Wait != "" || len(p.Delete) != 0 {
		t.Errorf("after a failure: %+v; want a run that deletes nothing first", p)
	}
	// One in progress: the run waits, saying which.
	running := append(slices.Clone(snaps), Snapshot{Name: "running", Created: start.Add(150 * time.Minute), State: InProgress})
	if p := (Retention{KeepLast: 3}).BeforeRun(running, now, time.UTC); !strings.Contains(p.Wait, "snapshot running") || len(p.Delete) != 0 {
		t.Errorf("with one in progress: %+v; want the run waiting for it", p)
	}
}
