package kairosplay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// UnitsFile is the file, in a host's Dir, that holds the played systemd's units and their
// states (SetUnit).
const UnitsFile = "systemd-units.json"

// UnitState is a played unit's state: ActiveState and SubState, as systemd names them
// (active/running, failed/failed, activating/start...).
type UnitState struct {
	ActiveState string `json:"activeState"`
	SubState    string `json:"subState"`
}

// SetUnit sets the state of the played unit name; a nil state removes it, so that systemctl
// shows it as a unit the host has no file for.
func (h *Host) SetUnit(name string, state *UnitState) error {
	units, err := h.units()
	if err != nil {
		return err
	}
	if state == nil {
		delete(units, name)
	} else {
		units[name] = *state
	}
	raw, err := json.Marshal(units)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(h.Dir, UnitsFile+".tmp")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(h.Dir, UnitsFile))
}

func (h *Host) units() (map[string]UnitState, error) {
	units := map[string]UnitState{}
	raw, err := os.ReadFile(filepath.Join(h.Dir, UnitsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return units, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &units); err != nil {
		return nil, fmt.Errorf("the played units, %s: %w", UnitsFile, err)
	}
	return units, nil
}

// unitProperties are the properties the played systemctl knows, in the order systemctl
// prints them: that of the D-Bus interface org.freedesktop.systemd1.Unit, whatever the order
// --property= names them in.
var unitProperties = []string{"Id", "LoadState", "ActiveState", "SubState"}

// systemctl plays `systemctl show --property=P[,P...] [--no-pager] [--] UNIT...` on the host's
// played units. The machines the tests run on have no systemd as PID 1 (a container's), so
// there is no manager for a real systemctl to ask; this prints what systemctl prints
// (internal/systemdunit's package comment and testdata say where that is documented): for
// each unit named, in that order, its properties as KEY=VALUE lines, a blank line before every
// unit's but the first; a unit SetUnit never set is LoadState=not-found, ActiveState=inactive,
// SubState=dead, as systemd shows a unit it has no file for; a set one is loaded, in its
// state. Only Id, LoadState, ActiveState and SubState are known. Any other verb or option
// fails as systemctl does, exit status 1 and a message on stderr.
func (r Runner) systemctl(argv []string) (drbd.Result, error) {
	args := argv[1:]
	if len(args) == 0 || args[0] != "show" {
		return failed(argv, fmt.Sprintf("the played systemctl knows only show, not %q", strings.Join(args, " ")))
	}
	var props, names []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			names = append(names, args[i+1:]...)
			i = len(args)
		case a == "--no-pager":
		case strings.HasPrefix(a, "--property="):
			for _, p := range strings.Split(strings.TrimPrefix(a, "--property="), ",") {
				if !slices.Contains(unitProperties, p) {
					return failed(argv, fmt.Sprintf("the played systemctl knows only the properties %s, not %q", strings.Join(unitProperties, ", "), p))
				}
				props = append(props, p)
			}
		case strings.HasPrefix(a, "-"):
			return failed(argv, fmt.Sprintf("systemctl: unrecognized option '%s'", a))
		default:
			names = append(names, a)
		}
	}
	if len(names) == 0 || len(props) == 0 {
		return failed(argv, "the played systemctl shows only the properties named with --property= of the units named")
	}
	units, err := r.Host.units()
	if err != nil {
		return failed(argv, err.Error())
	}
	var out strings.Builder
	for i, name := range names {
		values := map[string]string{"Id": name, "LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}
		if s, ok := units[name]; ok {
			values["LoadState"], values["ActiveState"], values["SubState"] = "loaded", s.ActiveState, s.SubState
		}
		if i > 0 {
			out.WriteString("\n")
		}
		for _, p := range unitProperties {
			if slices.Contains(props, p) {
				fmt.Fprintf(&out, "%s=%s\n", p, values[p])
			}
		}
	}
	return drbd.Result{Stdout: []byte(out.String())}, nil
}
