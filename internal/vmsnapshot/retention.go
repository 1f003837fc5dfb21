package vmsnapshot

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// State is what a snapshot is, for retention.
type State int

// The states of a snapshot.
const (
	// InProgress: not ended yet. Retention never deletes it: the run's failure deadline
	// ends it.
	InProgress State = iota
	// Good: every check of a good snapshot holds (Succeeded, readyToUse, every volume's
	// snapshot ready, the consistency required, every volume expected included). Only good
	// snapshots count.
	Good
	// Failed: ended, and not good.
	Failed
)

func (s State) String() string {
	switch s {
	case Good:
		return "Good"
	case Failed:
		return "Failed"
	}
	return "InProgress"
}

// Snapshot is one snapshot of a VM that the policy made, as retention sees it.
type Snapshot struct {
	Name    string
	Created time.Time
	State   State
}

// Retention is a parsed spec.retention. The keep rules are the union of: the last KeepLast
// good snapshots; the newest good one of each of the last KeepHourly hours, KeepDaily days and
// KeepWeekly ISO weeks that have one, by the calendar of the policy's time zone (the hour a
// daylight-saving change repeats counts as one). MaxAge, when set, drops good
// snapshots older than it that the rules kept. MinGood is a floor: never fewer good ones kept.
// The newest good snapshot is always kept.
type Retention struct {
	KeepLast, KeepHourly, KeepDaily, KeepWeekly int
	MaxAge                                      time.Duration
	MinGood                                     int
}

// Verdict is retention's decision on one snapshot, with the reason a person reads.
type Verdict struct {
	Snapshot
	Keep   bool
	Reason string
}

// MaxFailedKept is how many failed snapshots newer than the newest good one are kept as
// evidence: in a long failure burst the older ones go, so that failures do not pile up.
const MaxFailedKept = 3

// Plan decides, at now, on a VM's snapshots: the verdicts in the order of the snapshots, newest
// first (ties by name). It never deletes an InProgress snapshot, the newest good one, nor a
// good one that would leave fewer than MinGood; a failed one is deleted once a newer good one
// exists, kept until then (it is the evidence of what went wrong), but only the newest
// MaxFailedKept failures are.
func (r Retention) Plan(snaps []Snapshot, now time.Time, loc *time.Location) []Verdict {
	out := make([]Verdict, len(snaps))
	for i, s := range snaps {
		out[i] = Verdict{Snapshot: s}
	}
	slices.SortFunc(out, func(a, b Verdict) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if loc == nil {
		loc = time.UTC
	}
	buckets := []struct {
		keep int
		key  func(time.Time) int64
		what string
	}{
		{r.KeepHourly, func(t time.Time) int64 {
			y, m, d := t.In(loc).Date()
			return (int64(y)*10000+int64(m)*100+int64(d))*100 + int64(t.In(loc).Hour())
		}, "hour"},
		{r.KeepDaily, func(t time.Time) int64 { y, m, d := t.In(loc).Date(); return int64(y)*10000 + int64(m)*100 + int64(d) }, "day"},
		{r.KeepWeekly, func(t time.Time) int64 { y, w := t.In(loc).ISOWeek(); return int64(y)*100 + int64(w) }, "week"},
	}
	seen := make([]map[int64]bool, len(buckets))
	for i := range buckets {
		seen[i] = map[int64]bool{}
	}
	goods, kept, failures := 0, 0, 0
	var newestGood time.Time
	for i := range out {
		v := &out[i]
		switch v.State {
		case InProgress:
			v.Keep, v.Reason = true, "in progress: retention does not delete a snapshot before it ends"
			continue
		case Failed:
			switch {
			case !newestGood.IsZero():
				v.Reason = fmt.Sprintf("failed; a newer good snapshot exists (%s)", newestGood.UTC().Format(time.RFC3339))
			case failures >= MaxFailedKept:
				v.Reason = fmt.Sprintf("failed; the %d newer failures are kept as evidence", MaxFailedKept)
			default:
				v.Keep, v.Reason = true, "failed; kept as evidence until a newer good snapshot exists"
				failures++
			}
			continue
		}
		goods++
		var why string
		if goods == 1 {
			newestGood = v.Created
			why = "the newest good snapshot"
		}
		if why == "" && goods <= r.KeepLast {
			why = fmt.Sprintf("one of the last %d good", r.KeepLast)
		}
		for b, bucket := range buckets {
			if bucket.keep == 0 || len(seen[b]) >= bucket.keep {
				continue
			}
			if k := bucket.key(v.Created); !seen[b][k] {
				seen[b][k] = true
				if why == "" {
					why = fmt.Sprintf("the newest good of its %s (%s %d of %d)", bucket.what, keepName(bucket.what), len(seen[b]), bucket.keep)
				}
			}
		}
		if why != "" && goods > 1 && r.MaxAge > 0 && now.Sub(v.Created) > r.MaxAge {
			why = ""
			v.Reason = fmt.Sprintf("older than maxAge %s", r.MaxAge)
		}
		if why != "" {
			v.Keep, v.Reason = true, why
			kept++
		} else if v.Reason == "" {
			v.Reason = "no retention rule keeps it"
		}
	}
	// The floor: the newest good ones the rules dropped are kept until MinGood are.
	for i := range out {
		if kept >= r.MinGood {
			break
		}
		if v := &out[i]; v.State == Good && !v.Keep {
			v.Keep, v.Reason = true, fmt.Sprintf("kept for minGood %d (%s otherwise)", r.MinGood, v.Reason)
			kept++
		}
	}
	return out
}

func keepName(what string) string {
	switch what {
	case "hour":
		return "keepHourly"
	case "day":
		return "keepDaily"
	}
	return "keepWeekly"
}

// Cap is the most good snapshots the rules can keep: keepLast, keepHourly, keepDaily and
// keepWeekly added up (a snapshot kept by two rules counts once, so fewer are usually kept),
// and never fewer than minGood or one.
func (r Retention) Cap() int {
	return max(r.KeepLast+r.KeepHourly+r.KeepDaily+r.KeepWeekly, r.MinGood, 1)
}

// RunPlan is what a run does with a VM's snapshots before it creates the new one.
type RunPlan struct {
	// Wait says why the run creates nothing now, "" when it creates.
	Wait string
	// Delete are the snapshots to delete before the new one is created, each with the reason
	// retention drops it.
	Delete []Verdict
}

// BeforeRun plans a run at now. A run waits while a snapshot of the VM is in progress (the run
// before it has not ended: its failure deadline ends it). At the cap, it deletes before it
// creates what retention drops once the new snapshot counts, but only when the newest snapshot
// is good: a run after a failure creates without deleting, and retention deletes after it. It
// never deletes beforehand the newest good snapshot, nor a good one that would leave fewer than
// minGood (at least one): the new snapshot may fail. The caller deletes Delete, and creates
// only once every deletion is done: a deletion that cannot be done stops the run, so that
// snapshots do not pile up.
func (r Retention) BeforeRun(snaps []Snapshot, now time.Time, loc *time.Location) RunPlan {
	plan := r.Plan(snaps, now, loc)
	good := 0
	for _, v := range plan {
		switch {
		case v.State == InProgress:
			return RunPlan{Wait: fmt.Sprintf("snapshot %s, made %s, is still in progress: the run waits for it to end (its failure deadline ends it)",
				v.Name, v.Created.UTC().Format(time.RFC3339))}
		case v.State == Good && v.Keep:
			good++
		}
	}
	if good < r.Cap() || len(plan) == 0 || plan[0].State != Good {
		return RunPlan{}
	}
	// The names of the snapshots are the policy's own, never empty: "" is the new one.
	after := r.Plan(append(slices.Clone(snaps), Snapshot{Created: now, State: Good}), now, loc)
	keep := make(map[string]bool, len(after))
	for _, v := range after {
		if v.Keep && v.Name != "" {
			keep[v.Name] = true
		}
	}
	var out RunPlan
	floor := max(r.MinGood, 1)
	for i := len(plan) - 1; i >= 1; i-- { // oldest first; never plan[0], the newest good
		if v := plan[i]; v.State == Good && v.Keep && !keep[v.Name] && good > floor {
			v.Keep, v.Reason = false, "at the cap of "+fmt.Sprint(r.Cap())+": dropped once the new snapshot counts"
			out.Delete = append(out.Delete, v)
			good--
		}
	}
	return out
}
