package workflow

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	// The operator must know every time zone a user may name, even on a machine without
	// /usr/share/zoneinfo; the database adds about 450 KB to the binary.
	_ "time/tzdata"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Window is a parsed maintenance window: on each of its days it opens at its start, on the
// clock of its time zone, and closes at its end, on the next day when the end is not after
// the start. The zero Window is open at all times: every day, from midnight for 24 hours, in
// UTC.
//
// Clock changes are read as a person watching the local clock would read them. The window
// opens the first time the clock shows its start and closes the first time after that the
// clock shows its end:
//   - A time the clock skips (02:30 on 2026-03-29 in Europe/Berlin, where 02:00 jumps to
//     03:00) is taken as the moment of the jump, 03:00 CEST. A window from 02:30 to 04:00
//     that day is open from 03:00 to 04:00; one from 01:30 to 02:30 from 01:30 to 03:00.
//   - When the jump skips the whole window (02:30 to 02:45 that day), it opens at the jump
//     and stays open for its usual length, 03:00 to 03:15 CEST, rather than not at all.
//   - A time the clock shows twice (02:30 on 2026-10-25 in Europe/Berlin, where 03:00 goes
//     back to 02:00) is taken the first time, 02:30 CEST. A window from 02:30 to 03:30 that
//     day is open from 02:30 CEST to 03:30 CET, two hours; one from 02:30 to 02:45 only
//     from 02:30 to 02:45 CEST, not again when the clock shows those times an hour later.
//
// An opening can therefore be shorter than the window's length, or last one hour longer
// where the clock goes back by an hour. It never lasts longer than that: where the clock
// goes back by more (Antarctica/Troll goes back two hours), the opening closes early, one
// hour past its usual length.
type Window struct {
	// days holds the days on which the window opens, indexed by time.Weekday; when none is
	// set, it opens every day.
	days [7]bool
	// start and end are minutes after midnight.
	start, end int
	// location is the time zone of start and end; nil means UTC.
	location *time.Location
}

// maxClockGoingBack is how much longer than its length an opening may last: one hour, what
// a clock going back from summer time adds in almost every time zone.
const maxClockGoingBack = time.Hour

// timeOfDay is the form of a start or an end, as the API's validation pattern has it.
var timeOfDay = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])$`)

// timeZoneName is the form of a time zone name, as the API's validation pattern has it. It
// keeps names that would read a file outside the time zone database away from
// time.LoadLocation.
var timeZoneName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+/-]{0,63}$`)

// weekdays maps the API's names of the days to Go's.
var weekdays = map[nwv1.Weekday]time.Weekday{
	"Monday": time.Monday, "Tuesday": time.Tuesday, "Wednesday": time.Wednesday,
	"Thursday": time.Thursday, "Friday": time.Friday, "Saturday": time.Saturday,
	"Sunday": time.Sunday,
}

// ParseWindow parses w. An error names the field that is wrong, under fieldPath (for
// example spec.maintenanceWindow), and says why. No window at all (w is nil) is an error:
// whether a missing window means "any time" is for the caller to decide.
func ParseWindow(w *nwv1.MaintenanceWindow, fieldPath string) (Window, error) {
	if w == nil {
		return Window{}, fmt.Errorf("%s: no maintenance window", fieldPath)
	}
	var parsed Window
	for i, name := range w.Days {
		day, ok := weekdays[name]
		if !ok {
			return Window{}, fmt.Errorf("%s.days[%d]: %q is not a day of the week", fieldPath, i, name)
		}
		if parsed.days[day] {
			return Window{}, fmt.Errorf("%s.days[%d]: %q is listed twice", fieldPath, i, name)
		}
		parsed.days[day] = true
	}
	var err error
	if parsed.start, err = parseTimeOfDay(w.Start, fieldPath+".start"); err != nil {
		return Window{}, err
	}
	if parsed.end, err = parseTimeOfDay(w.End, fieldPath+".end"); err != nil {
		return Window{}, err
	}
	if parsed.location, err = LoadTimeZone(w.TimeZone, fieldPath+".timeZone"); err != nil {
		return Window{}, err
	}
	return parsed, nil
}

// parseTimeOfDay returns the minutes after midnight that s, as HH:MM, names.
func parseTimeOfDay(s, field string) (int, error) {
	m := timeOfDay.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%s: %q is not a time of day as HH:MM", field, s)
	}
	// The pattern admits two digits each, which always convert.
	hours, _ := strconv.Atoi(m[1])
	minutes, _ := strconv.Atoi(m[2])
	return hours*60 + minutes, nil
}

// LoadTimeZone returns the IANA time zone name; an empty name is UTC. "Local" is refused:
// it is the zone of whatever machine the operator runs on, not a place.
func LoadTimeZone(name, field string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" || !timeZoneName.MatchString(name) {
		return nil, fmt.Errorf("%s: unknown time zone %q", field, name)
	}
	location, err := time.LoadLocation(name)
	if err != nil {
		// LoadLocation says no more than that it does not know the name.
		return nil, fmt.Errorf("%s: unknown time zone %q", field, name)
	}
	return location, nil
}

// At says whether the window is open at now. When it is, opens and closes are when this
// opening began and when it ends. When it is not, they are when the next opening begins,
// always after now and within eight days, and when that one ends. Both are in the window's
// time zone.
//
// Openings that follow each other without a gap (a 24-hour window on two days in a row)
// count as separate: closes is the end of the one now is in.
func (w Window) At(now time.Time) (open bool, opens, closes time.Time) {
	location := w.timeZone()
	year, month, day := now.In(location).Date()
	// An opening lasts at most 25 hours, so one that began two days ago by the local
	// calendar can still be open. The next opening is at most seven days ahead: a day
	// whose opening has passed comes again a week later, and every listed day opens.
	for offset := -2; offset <= 8; offset++ {
		date := time.Date(year, month, day+offset, 0, 0, 0, 0, time.UTC)
		if !w.opensOn(date.Weekday()) {
			continue
		}
		o, c := w.opening(date)
		switch {
		case !now.Before(o) && now.Before(c):
			// Openings on different days can overlap only where a clock goes back;
			// the one that ends last says how long the window stays open.
			if !open || c.After(closes) {
				open, opens, closes = true, o, c
			}
		case o.After(now):
			if open {
				return true, opens, closes
			}
			return false, o, c
		}
	}
	return open, opens, closes
}

// String describes the window in a few words, for messages: "Mon,Sat 22:00-02:00
// Europe/Berlin", or "daily 22:00-02:00 UTC".
func (w Window) String() string {
	days := "daily"
	if w.days != [7]bool{} {
		var names []string
		// Monday first, as the API lists the days.
		for _, day := range []time.Weekday{time.Monday, time.Tuesday, time.Wednesday,
			time.Thursday, time.Friday, time.Saturday, time.Sunday} {
			if w.days[day] {
				names = append(names, day.String()[:3])
			}
		}
		days = strings.Join(names, ",")
	}
	return fmt.Sprintf("%s %s-%s %s", days, clock(w.start), clock(w.end), w.timeZone())
}

// clock formats minutes after midnight as HH:MM.
func clock(minutes int) string { return fmt.Sprintf("%02d:%02d", minutes/60, minutes%60) }

func (w Window) timeZone() *time.Location {
	if w.location == nil {
		return time.UTC
	}
	return w.location
}

func (w Window) opensOn(day time.Weekday) bool {
	return w.days == [7]bool{} || w.days[day]
}

// length is how long the window is by the clock: from start to end, over midnight when the
// end is not after the start, a whole day when they are equal.
func (w Window) length() time.Duration {
	minutes := w.end - w.start
	if minutes <= 0 {
		minutes += 24 * 60
	}
	return time.Duration(minutes) * time.Minute
}

// opening returns when the window opens on date (midnight UTC of that calendar day) and
// when that opening closes, by the rules the Window type describes.
func (w Window) opening(date time.Time) (opens, closes time.Time) {
	location := w.timeZone()
	opens = firstShown(date.Add(time.Duration(w.start)*time.Minute), location)
	endDate := date
	if w.end <= w.start {
		endDate = date.AddDate(0, 0, 1)
	}
	closes = firstShown(endDate.Add(time.Duration(w.end)*time.Minute), location)
	if !closes.After(opens) {
		// One jump of the clock skipped the whole window.
		closes = opens.Add(w.length())
	}
	if longest := opens.Add(w.length() + maxClockGoingBack); closes.After(longest) {
		closes = longest
	}
	return opens, closes
}

// firstShown returns the first instant at which the clock in location shows wall, a date
// and time of day written as UTC; or, when the clock skips it, the instant of the jump.
func firstShown(wall time.Time, location *time.Location) time.Time {
	t := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, location)
	// time.Date leaves it open which instant it returns for a time the clock skips or shows
	// twice, so each case is settled here from the zone's transitions.
	zoneStart, zoneEnd := t.ZoneBounds()
	switch shown := clockShows(t); {
	case shown.After(wall) && !zoneStart.IsZero():
		// Skipped, and t is past the jump: the jump began t's zone.
		return zoneStart
	case shown.Before(wall) && !zoneEnd.IsZero():
		// Skipped, and t is before the jump: the jump ends t's zone.
		return zoneEnd
	}
	if zoneStart.IsZero() {
		return t
	}
	// Shown twice if the zone before t's had a larger offset: the first time is earlier by
	// the difference, in that zone.
	_, offset := t.Zone()
	_, offsetBefore := zoneStart.Add(-time.Nanosecond).Zone()
	if offsetBefore <= offset {
		return t
	}
	earlier := t.Add(-time.Duration(offsetBefore-offset) * time.Second)
	if earlier.Before(zoneStart) && clockShows(earlier).Equal(wall) {
		return earlier
	}
	return t
}

// clockShows returns the date and time of day the clock shows at t, in t's location,
// written as UTC so that it compares with another such reading.
func clockShows(t time.Time) time.Time {
	_, offset := t.Zone()
	return t.UTC().Add(time.Duration(offset) * time.Second)
}
