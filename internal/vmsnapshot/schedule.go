// Package vmsnapshot is what a VMSnapshotPolicy decides, apart from the API: when its runs are
// due (its cron schedule, in its time zone, and what happens to a run the operator missed),
// whether a snapshot KubeVirt made is good, and which of its snapshots retention keeps. Each
// is a pure function of what it is given, so that it is tested on a fake clock, across days
// and daylight-saving changes, and on KubeVirt's own types.
package vmsnapshot

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Schedule is a parsed spec.schedule: a standard five-field cron expression (minute, hour,
// day of month, month, day of week) or one of its descriptors (@hourly, @daily, @weekly,
// @monthly, @yearly), evaluated in a time zone. It is parsed by robfig/cron/v3, the parser
// Kubernetes' CronJob uses, so an expression means here what it means there.
type Schedule struct {
	spec     cron.Schedule
	location *time.Location
	text     string
	// everyHour: the hour field takes every hour.
	everyHour bool
}

// parser reads the standard five fields and the descriptors; @every is refused apart (it is
// an interval from when it was read, not a time of the clock).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MaxMissed bounds the scheduled times a decision walks between the last one acted on and
// now: a policy whose operator was down for longer than that many runs is told of the newest
// it can find, as Kubernetes' CronJob does after 100 missed starts.
const MaxMissed = 10_000

// ParseSchedule parses expr in the IANA time zone timeZone (UTC when empty); errors name
// field (e.g. "spec.schedule") and say why.
func ParseSchedule(expr, timeZone, field string) (Schedule, error) {
	text := strings.TrimSpace(expr)
	switch {
	case text == "":
		return Schedule{}, fmt.Errorf("%s.cron: empty: give five fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily", field)
	case strings.HasPrefix(text, "TZ=") || strings.HasPrefix(text, "CRON_TZ="):
		return Schedule{}, fmt.Errorf("%s.cron: %q names a time zone: put it in %s.timeZone", field, expr, field)
	case strings.HasPrefix(text, "@every"):
		return Schedule{}, fmt.Errorf("%s.cron: %q is an interval from whenever it is read, not a time of the clock: give five fields, such as \"0 */6 * * *\"", field, expr)
	}
	loc, err := workflow.LoadTimeZone(timeZone, field+".timeZone")
	if err != nil {
		return Schedule{}, err
	}
	spec, err := parser.Parse(text)
	if err != nil {
		return Schedule{}, fmt.Errorf("%s.cron: %q: %w", field, expr, err)
	}
	// An expression that names a day that never comes (30 February) has no next time.
	if spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return Schedule{}, fmt.Errorf("%s.cron: %q never comes: no date matches it", field, expr)
	}
	every := false
	if ss, ok := spec.(*cron.SpecSchedule); ok {
		every = ss.Hour&(1<<24-1) == 1<<24-1
	}
	return Schedule{spec: spec, location: loc, text: text, everyHour: every}, nil
}

// Location is the schedule's time zone.
func (s Schedule) Location() *time.Location { return s.location }

func (s Schedule) String() string {
	if s.location == time.UTC {
		return s.text + " (UTC)"
	}
	return s.text + " (" + s.location.String() + ")"
}

// Next is the first scheduled time after t. A time of the clock that a daylight-saving change
// skips has no run that day. One it repeats runs once, the first time, as cron does for a job
// at a fixed hour; a schedule that runs every hour runs at each real hour, so the repeated
// hour runs twice (no gap of two hours).
func (s Schedule) Next(t time.Time) time.Time {
	n := s.spec.Next(t.In(s.location))
	for !n.IsZero() && !s.everyHour && s.repeats(n) {
		n = s.spec.Next(n)
	}
	return n
}

// repeats reports whether n shows the same time of the clock as a scheduled time shortly
// before it: the clock went back between them.
func (s Schedule) repeats(n time.Time) bool {
	wall := n.Format("2006-01-02 15:04:05")
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := n.Add(-back)
		if e.Format("2006-01-02 15:04:05") == wall && s.spec.Next(e.Add(-time.Second)).Equal(e) {
			return true
		}
	}
	return false
}

// CatchUp is what a policy does with a run it missed by more than its starting deadline (its
// operator was down, or the cluster-wide lock put it off): Skip it, or RunOnce (once, however
// many were missed).
type CatchUp string

// The catch-up modes.
const (
	CatchUpSkip    CatchUp = "Skip"
	CatchUpRunOnce CatchUp = "RunOnce"
)

// Decision is what a policy does at a moment.
type Decision struct {
	// Scheduled is the newest scheduled time not acted on yet, zero when none has come: the
	// time the policy records as acted on (run or skipped).
	Scheduled time.Time
	// Run: the run of Scheduled starts now.
	Run bool
	// Late: Run, past its starting deadline, as catch-up RunOnce allows.
	Late bool
	// Missed counts the scheduled times before Scheduled, since the last one acted on, that
	// get no run of their own; MissedMore says there were more than MaxMissed.
	Missed     int
	MissedMore bool
	// Skipped says why Scheduled gets no run, when it does not.
	Skipped string
	// Next is the first scheduled time after now.
	Next time.Time
}

// Due decides, at now, on the scheduled times after last (the newest the policy acted on, or
// when it was created): the newest of them runs when now is within startingDeadline of it;
// past it, it runs once late (catch-up RunOnce) or is skipped (Skip). The older ones are
// missed, never run: a policy that was down for a day takes one snapshot, not twenty-four.
func (s Schedule) Due(last, now time.Time, startingDeadline time.Duration, catchUp CatchUp) Decision {
	d := Decision{Next: s.Next(now)}
	var newest time.Time
	walked := 0
	for t := s.Next(last); !t.IsZero() && !t.After(now); t = s.Next(t) {
		if !newest.IsZero() {
			d.Missed++
		}
		newest = t
		if walked++; walked > MaxMissed {
			d.MissedMore = true
			if latest := s.latestBefore(now); latest.After(newest) {
				newest = latest
			}
			break
		}
	}
	if newest.IsZero() {
		return d
	}
	d.Scheduled = newest
	switch late := now.Sub(newest); {
	case late <= startingDeadline:
		d.Run = true
	case catchUp == CatchUpRunOnce:
		d.Run, d.Late = true, true
	default:
		d.Skipped = fmt.Sprintf("the run of %s was missed by %s, more than the starting deadline %s, and catchUp is Skip",
			newest.In(s.location).Format(time.RFC3339), late.Round(time.Second), startingDeadline)
	}
	return d
}

// latestBefore is the newest scheduled time at or before now, found by walking from ever
// further back (an hour, two, four...): only a schedule that came more than MaxMissed times
// since it was last acted on asks, so it is found close to now.
func (s Schedule) latestBefore(now time.Time) time.Time {
	for back := time.Hour; ; back *= 2 {
		var found time.Time
		for t := s.Next(now.Add(-back)); !t.IsZero() && !t.After(now); t = s.Next(t) {
			found = t
		}
		if !found.IsZero() || back > 800*24*time.Hour {
			return found
		}
	}
}
