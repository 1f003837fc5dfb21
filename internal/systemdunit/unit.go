// Package systemdunit reads systemd units' states as `systemctl show` prints them, and checks
// the unit names passed to it.
//
// `systemctl show --property=Id,LoadState,ActiveState,SubState --no-pager -- UNIT...` prints,
// for each unit named, one KEY=VALUE line a property, and a blank line before every unit but
// the first (verb_show and show_one in systemd's src/systemctl/systemctl-show.c, at commit
// ade491c527e929eebe583b48ce9ef1627f25bf8e; systemctl(1), "show PATTERN...|JOB...": "Show
// properties of one or more units ... --property= to limit the properties"). A unit systemd
// has no file for is shown too, with LoadState=not-found. The units are shown in the order
// named, which the blocks are matched by: a name that is an alias shows the unit it resolves
// to, whose Id differs.
package systemdunit

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// MaxName is the longest unit name systemd accepts: unit_name_is_valid refuses a name of
// UNIT_NAME_MAX (256) bytes or more.
const MaxName = 255

// namePattern is the API's rule for a unit name (SystemdUnitName): letters, digits and
// ":-_.\", an instance after one "@", and a unit type's suffix. No glob characters, which
// systemctl would expand, and no name it could take for a job ID (all digits).
var namePattern = regexp.MustCompile(`^[-A-Za-z0-9:_.\\]+(@[-A-Za-z0-9:_.\\]+)?[.](service|socket|target|device|mount|automount|swap|timer|path|slice|scope)$`)

// ValidName says why name is not a unit name the agent passes to systemctl; nil when it is.
func ValidName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a systemd unit name is empty")
	case len(name) > MaxName:
		return fmt.Errorf("the systemd unit name %.40q... is %d bytes long, more than systemd's %d", name, len(name), MaxName)
	case !namePattern.MatchString(name):
		return fmt.Errorf("%q is not a systemd unit name: letters, digits and :-_.\\ (an instance after one @), ending in a unit type's suffix (.service, .target, .mount, .socket, .timer...)", name)
	}
	return nil
}

// Properties are the properties ShowArgs asks for.
var Properties = []string{"Id", "LoadState", "ActiveState", "SubState"}

// ShowArgs are systemctl's arguments that show names' states: the names after "--", so that
// none is taken for an option. Each name must have passed ValidName.
func ShowArgs(names []string) []string {
	return append([]string{"show", "--property=" + strings.Join(Properties, ","), "--no-pager", "--"}, names...)
}

// State is one unit's state, as `systemctl show` prints it.
type State struct {
	// Name is the unit as it was named; ID is systemctl's Id, the unit it resolves to.
	Name, ID                         string
	LoadState, ActiveState, SubState string
}

// Active reports whether the unit is active (ActiveState=active).
func (s State) Active() bool { return s.ActiveState == "active" }

// maxOutput bounds what ParseShow reads: 16 units of four short properties fit many times.
const maxOutput = 64 << 10

// ParseShow reads the output of systemctl with ShowArgs(names): one block of KEY=VALUE lines
// for each name, in order, separated by blank lines. It fails on anything else: a line
// without "=", more or fewer blocks than names, a block without LoadState or ActiveState.
func ParseShow(out []byte, names []string) ([]State, error) {
	if len(out) > maxOutput {
		return nil, fmt.Errorf("systemctl show printed %d bytes, more than %d", len(out), maxOutput)
	}
	var blocks []map[string]string
	var block map[string]string
	for i, line := range bytes.Split(out, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			block = nil
			continue
		}
		key, value, ok := bytes.Cut(line, []byte("="))
		if !ok || len(key) == 0 {
			return nil, fmt.Errorf("systemctl show's line %d, %.80q, is not KEY=VALUE", i+1, line)
		}
		if block == nil {
			block = map[string]string{}
			blocks = append(blocks, block)
		}
		k := string(key)
		if _, dup := block[k]; dup {
			return nil, fmt.Errorf("systemctl show's line %d repeats %s within one unit's properties", i+1, k)
		}
		block[k] = string(value)
	}
	if len(blocks) != len(names) {
		return nil, fmt.Errorf("systemctl show printed the properties of %d units for the %d named (%s)", len(blocks), len(names), strings.Join(names, ", "))
	}
	states := make([]State, len(names))
	for i, b := range blocks {
		s := State{Name: names[i], ID: b["Id"], LoadState: b["LoadState"], ActiveState: b["ActiveState"], SubState: b["SubState"]}
		if s.LoadState == "" || s.ActiveState == "" {
			return nil, fmt.Errorf("systemctl show printed no LoadState or ActiveState for %s", names[i])
		}
		states[i] = s
	}
	return states, nil
}
