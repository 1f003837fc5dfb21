package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// phaseStyle colours a cluster phase: steady green, changing yellow, in trouble red.
func phaseStyle(p nwv1.ClusterPhase) style {
	switch p {
	case nwv1.ClusterSingleNode, nwv1.ClusterMultiNode:
		return green
	case nwv1.ClusterDegraded, nwv1.ClusterUnknown, "":
		return red
	}
	return yellow
}

func conditionStyle(s metav1.ConditionStatus) style {
	switch s {
	case metav1.ConditionTrue:
		return green
	case metav1.ConditionFalse:
		return red
	}
	return yellow
}

// renderStatus writes the report for a person. It is a function of the report and the clock
// only.
func renderStatus(w io.Writer, r *statusReport, now time.Time, p palette) error {
	var b strings.Builder
	phase := string(r.Phase)
	if phase == "" {
		phase = "(not observed yet)"
	}
	fmt.Fprintf(&b, "NodewrightCluster %s: %s\n", r.Name, p.paint(phaseStyle(r.Phase), phase))
	fmt.Fprintf(&b, "  Management:    %s\n", managementLine(r.Management, p))
	if r.Management.InEffect == nwv1.ManagementManaged {
		b.WriteString("  Legacy state:  not read (Managed)")
	} else {
		legacyState := string(r.LegacyState)
		if legacyState == "" {
			legacyState = "(unknown)"
		}
		fmt.Fprintf(&b, "  Legacy state:  %s", legacyState)
		if r.LegacyStateSince != nil {
			fmt.Fprintf(&b, " since %s (%s ago)", timestamp(r.LegacyStateSince.Time), age(r.LegacyStateSince, now))
		}
		if r.LegacyGeneration > 0 {
			fmt.Fprintf(&b, ", generation %d", r.LegacyGeneration)
		}
	}
	fmt.Fprintf(&b, "\n  Nodes ready:   %d of %d\n\n", r.Nodes.Ready, r.Nodes.Total)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}

	conds := table{header: []string{"CONDITION", "STATUS", "REASON", "MESSAGE"}}
	for _, cond := range r.Conditions {
		conds.add(c(cond.Type), cs(string(cond.Status), conditionStyle(cond.Status)), c(cond.Reason), c(oneLine(cond.Message)))
	}
	if len(r.Conditions) == 0 {
		conds.add(c("(none yet)"))
	}
	if err := conds.write(w, p); err != nil {
		return err
	}

	fmt.Fprintln(w)
	nodes := table{header: []string{"NODE", "ROLE", "HEARTBEAT", "STALE", "DRBD CONNECTED", "UP-TO-DATE", "OUT-OF-SYNC", "BOND"}}
	lastSeenOnly := false
	for _, a := range r.Agents {
		hb := "-"
		if a.Heartbeat.AgeSeconds != nil {
			hb = shortDuration(time.Duration(*a.Heartbeat.AgeSeconds)*time.Second) + " ago"
			if a.Heartbeat.Source == heartbeatFromLastSeen {
				hb += "*"
				lastSeenOnly = true
			}
		}
		stale := cs("no", green)
		if a.Heartbeat.Stale {
			stale = cs("yes", red)
		}
		connected, upToDate, outOfSync := cs("-", dim), cs("-", dim), cs("-", dim)
		if s := a.Storage; s != nil {
			connected = cs(fmt.Sprintf("%d/%d", s.Connected, s.Resources), ratioStyle(s.Connected, s.Resources))
			upToDate = cs(fmt.Sprintf("%d/%d", s.UpToDate, s.Resources), ratioStyle(s.UpToDate, s.Resources))
			outOfSync = c(kib(s.OutOfSyncKiB))
			if s.OutOfSyncKiB > 0 {
				outOfSync.style = yellow
			}
		}
		bond := string(a.BondMode)
		if bond == "" {
			bond = "-"
		}
		role := string(a.Role)
		if role == "" {
			role = "-"
		}
		nodes.add(c(a.Name), c(role), c(hb), stale, connected, upToDate, outOfSync, c(bond))
	}
	if len(r.Agents) == 0 {
		nodes.add(c("(no NodewrightAgentStatus objects)"))
	}
	if err := nodes.write(w, p); err != nil {
		return err
	}
	if lastSeenOnly {
		where := "in the legacy ConfigMap"
		if r.Management.InEffect == nwv1.ManagementManaged {
			where = "Lease of the node's agent"
		}
		fmt.Fprintln(w, p.paint(dim, "* no heartbeat "+where+" (or it could not be read): age of status.heartbeat.lastSeen, which changes only when the node's freshness does"))
	}

	if pr := r.Profile; pr != nil {
		fmt.Fprintln(w)
		if a := pr.Active; a != nil {
			fmt.Fprintf(w, "Profile: %s version %s, %s", a.Name, a.Version, a.Digest)
			if a.KeyID != "" {
				fmt.Fprintf(w, ", signed by %s", a.KeyID)
			}
			fmt.Fprintln(w)
		} else {
			fmt.Fprintf(w, "Profile: %s requested, none in force\n", pr.Requested)
		}
		if pr.Active != nil && pr.Requested != "" && pr.Requested != pr.Active.Name {
			fmt.Fprintf(w, "  Requested:     %s\n", pr.Requested)
		}
		if cond := pr.Applied; cond != nil {
			fmt.Fprintf(w, "  %s: %s %s: %s\n", nwv1.ConditionProfileApplied, p.paint(conditionStyle(cond.Status), string(cond.Status)), cond.Reason, oneLine(cond.Message))
		}
	}

	fmt.Fprintln(w)
	if len(r.RecentWarnings) == 0 {
		fmt.Fprintln(w, "Recent warnings: none")
		return nil
	}
	fmt.Fprintln(w, "Recent warnings (newest last):")
	warnings := table{header: []string{"TIME", "SOURCE", "REASON", "MESSAGE"}}
	for _, wr := range r.RecentWarnings {
		warnings.add(c(timestamp(wr.Time.Time)), c(string(wr.Source)), cs(wr.Reason, yellow), c(oneLine(wr.Message)))
	}
	return warnings.write(w, p)
}

// managementLine says who decides about the nodes: the mode in effect, and the one requested
// when it differs, or why Managed does not let workflows change nodes.
func managementLine(m managementReport, p palette) string {
	inEffect := string(m.InEffect)
	if inEffect == "" {
		inEffect = "(not observed yet)"
	}
	line := inEffect
	switch m.InEffect {
	case nwv1.ManagementObserve:
		line += ": the legacy DaemonSet decides"
	case nwv1.ManagementManaged:
		line += ": the agents report, and workflows may change nodes"
	}
	h := m.Handover
	switch {
	case m.InEffect != m.Requested && h != nil && h.Reason == nwv1.ReasonHandoverRefused:
		line = p.paint(yellow, inEffect) + "; " + string(m.Requested) + " requested and refused (ManagementApplied)"
	case m.InEffect != m.Requested:
		line = p.paint(yellow, inEffect) + "; " + string(m.Requested) + " requested"
	case m.InEffect == nwv1.ManagementManaged && h != nil && h.Status != metav1.ConditionTrue:
		line = p.paint(red, inEffect) + ", but " + h.Reason + ": no workflow changes a node (ManagementApplied)"
	}
	return line
}

func ratioStyle(n, of int32) style {
	if n == of {
		return green
	}
	return red
}

// oneLine keeps a message on its table row.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
