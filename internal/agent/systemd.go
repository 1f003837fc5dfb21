package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/kubelite"
	"github.com/spectrocloud/nodewright/internal/systemdunit"
)

// SystemdUnits reads the states of the systemd units the BootRecoveryPolicy names
// (spec.postBootHealth.systemdUnits) on the host, with the host's own systemctl:
// `systemctl show --property=Id,LoadState,ActiveState,SubState --no-pager -- UNIT...`. It reads
// the policy, the singleton, at every report, so that a unit added to it is reported within
// a report interval. Reading changes nothing on the host.
type SystemdUnits struct {
	// Client reads the BootRecoveryPolicy.
	Client *kubelite.Client
	// Runner runs Systemctl.
	Runner drbd.Runner
	// Systemctl is the argv prefix of systemctl: on Kairos, the host's, through its nsenter
	// (cmd/agent).
	Systemctl []string
}

// BootRecoveryPolicies is the API's resource of BootRecoveryPolicies.
var BootRecoveryPolicies = kubelite.Resource{Group: nwv1.GroupVersion.Group, Version: nwv1.GroupVersion.Version, Resource: "bootrecoverypolicies"}

// systemctlTimeout bounds one systemctl show, which answers in milliseconds.
const systemctlTimeout = 30 * time.Second

// Observe returns the states of the units the policy names, in its order: none when there is
// no policy or it names none. A name the agent refuses (the API admits none of them; the
// agent checks again before a command line) is left out and said in the error, the others
// read; a systemctl that fails, or whose output cannot be read, reports no unit and says why.
func (u *SystemdUnits) Observe(ctx context.Context) ([]nwv1.SystemdUnitStatus, error) {
	if u.Runner == nil || len(u.Systemctl) == 0 {
		return nil, errors.New("this agent has no systemctl to read them with")
	}
	p := &nwv1.BootRecoveryPolicy{}
	err := u.Client.Get(ctx, BootRecoveryPolicies.Path("", nwv1.BootRecoveryPolicyName), p)
	if kubelite.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the BootRecoveryPolicy %s: %w", nwv1.BootRecoveryPolicyName, err)
	}
	var names []string
	var refused []error
	for _, n := range p.Spec.PostBootHealth.SystemdUnits {
		if err := systemdunit.ValidName(string(n)); err != nil {
			refused = append(refused, err)
			continue
		}
		if len(names) < nwv1.MaxSystemdUnits {
			names = append(names, string(n))
		}
	}
	if len(names) == 0 {
		return nil, errors.Join(refused...)
	}
	runCtx, cancel := context.WithTimeout(ctx, systemctlTimeout)
	defer cancel()
	argv := append(append([]string{}, u.Systemctl...), systemdunit.ShowArgs(names)...)
	out, err := u.Runner.Run(runCtx, argv)
	if err != nil {
		return nil, errors.Join(append(refused, err)...)
	}
	states, err := systemdunit.ParseShow(out.Stdout, names)
	if err != nil {
		return nil, errors.Join(append(refused, err)...)
	}
	units := make([]nwv1.SystemdUnitStatus, len(states))
	for i, s := range states {
		units[i] = nwv1.SystemdUnitStatus{Name: s.Name, LoadState: clip(s.LoadState, 32), ActiveState: clip(s.ActiveState, 32), SubState: clip(s.SubState, 32)}
	}
	return units, errors.Join(refused...)
}
