package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/text"
)

// BondObserver reads a bond on the host: its mode and its member links (netlink and sysfs on
// a real host; test/site plays one on a veth where the kernel has no bonding driver).
type BondObserver interface {
	Bond(ctx context.Context, name string) (nwv1.BondObservation, error)
}

// HostObserver reads what the agent reports of its node from the host itself: the storage bond,
// DRBD and the OS. Reading changes nothing on the host.
type HostObserver struct {
	// BondName is the storage bond to report, read with Bond; none when empty. A bond named
	// with no observer to read it is reported unobserved.
	Bond     BondObserver
	BondName string

	// DRBD runs `drbdsetup status --json`; nil reports no DRBD.
	DRBD drbd.Runner
	// Drbdsetup replaces the program and options before "status" (tests); ["drbdsetup"] when
	// empty.
	Drbdsetup []string
	// ProcDRBD is the kernel's /proc/drbd, there while the DRBD module is loaded; "/proc/drbd"
	// when empty.
	ProcDRBD string

	// OS reads the host's OS facts in Host; nil reports no OS.
	OS   hostos.Provider
	Host hostos.Host
	// Kairos, on a Kairos node, keeps the records its operations left: the report's
	// os.kairos.lastFallback comes from them. nil: none reported.
	Kairos *Kairos
	// Units reads the systemd units the BootRecoveryPolicy names, reported in
	// os.systemdUnits; nil: none reported.
	Units *SystemdUnits
}

// drbdStatusTimeout bounds one `drbdsetup status`, which answers in milliseconds.
const drbdStatusTimeout = 30 * time.Second

// maxConditionMessage bounds what the agent's conditions quote of an error.
const maxConditionMessage = 1024

// Observation is what the agent reports of its node: the fields of its NodewrightAgentStatus
// it owns, conditions without their transition times.
type Observation struct {
	Storage    *nwv1.DRBDStatus
	Network    *nwv1.NodeNetworkStatus
	OS         *nwv1.HostOSStatus
	Conditions []metav1.Condition
}

// Observe reads the host. What cannot be read is left out of the observation and said in a
// condition: StorageHealthy for DRBD, HostObserved for the bond and the OS.
func (o *HostObserver) Observe(ctx context.Context) Observation {
	var obs Observation
	var storageHealthy metav1.Condition
	obs.Storage, storageHealthy = o.storage(ctx)

	var problems []string
	reason := nwv1.ReasonHostObserved
	read := []string{}
	if o.OS != nil {
		facts, err := o.OS.Facts(o.Host)
		if o.Kairos != nil && facts.Kairos != nil {
			fallback, fbErr := o.Kairos.LastFallback(facts.BootID, facts.Kairos.UpgradeFailure, facts.Kairos.Image)
			facts.Kairos.LastFallback = fallback
			err = errors.Join(err, fbErr)
		}
		if !equality.Semantic.DeepEqual(facts, nwv1.HostOSStatus{}) {
			obs.OS = &facts
		}
		if err != nil {
			reason = nwv1.ReasonOSNotObserved
			problems = append(problems, "the OS: "+err.Error())
		} else {
			read = append(read, "the OS")
		}
	}
	if o.Units != nil {
		units, err := o.Units.Observe(ctx)
		if len(units) > 0 {
			if obs.OS == nil {
				obs.OS = &nwv1.HostOSStatus{}
			}
			obs.OS.SystemdUnits = units
		}
		if err != nil {
			if reason == nwv1.ReasonHostObserved {
				reason = nwv1.ReasonSystemdUnitsNotObserved
			}
			problems = append(problems, "the systemd units: "+err.Error())
		} else if len(units) > 0 {
			names := make([]string, len(units))
			for i, u := range units {
				names[i] = u.Name
			}
			read = append(read, "the systemd units "+strings.Join(names, ", "))
		}
	}
	if o.BondName != "" {
		network, err := o.bond(ctx)
		obs.Network = network
		if err != nil {
			if reason == nwv1.ReasonHostObserved {
				reason = nwv1.ReasonBondNotObserved
			}
			problems = append(problems, "the storage bond "+o.BondName+": "+err.Error())
		} else {
			read = append(read, "the storage bond "+o.BondName)
		}
	}
	hostObserved := metav1.Condition{Type: nwv1.ConditionHostObserved, Status: metav1.ConditionTrue, Reason: reason}
	switch {
	case len(problems) > 0:
		hostObserved.Status = metav1.ConditionFalse
		hostObserved.Message = text.Shorten(strings.Join(problems, "; "), maxConditionMessage)
	case len(read) == 0:
		hostObserved.Message = "nothing of the host is to be read"
	default:
		hostObserved.Message = "read " + strings.Join(read, " and ")
	}
	obs.Conditions = []metav1.Condition{storageHealthy, hostObserved}
	return obs
}

// bond reads the storage bond, keeping only what the API admits: an interface name Linux
// accepts, a mode the API knows, at most 16 members.
func (o *HostObserver) bond(ctx context.Context) (*nwv1.NodeNetworkStatus, error) {
	if o.Bond == nil {
		return nil, errors.New("this agent has no way to read a bond yet")
	}
	b, err := o.Bond.Bond(ctx, o.BondName)
	if err != nil {
		return nil, err
	}
	if b.Interface == "" {
		b.Interface = o.BondName
	}
	var problems []string
	if len(b.Interface) > maxInterfaceName {
		return nil, fmt.Errorf("the observer named the interface %q, longer than Linux allows", b.Interface)
	}
	if b.Mode != "" && !slices.Contains(bondModes, b.Mode) {
		problems = append(problems, fmt.Sprintf("its mode %q is not a Linux bonding mode", b.Mode))
		b.Mode = ""
	}
	members := make([]nwv1.BondMember, 0, len(b.Members))
	for _, m := range b.Members {
		if m.Name == "" || len(m.Name) > maxInterfaceName {
			problems = append(problems, fmt.Sprintf("a member named %q is not an interface name", m.Name))
			continue
		}
		members = append(members, m)
	}
	if len(members) > maxBondMembers {
		problems = append(problems, fmt.Sprintf("%d members, of which the first %d are reported", len(members), maxBondMembers))
		members = members[:maxBondMembers]
	}
	b.Members = members
	if len(b.Members) == 0 {
		b.Members = nil
	}
	network := &nwv1.NodeNetworkStatus{BondMode: b.Mode, Bond: &b}
	if len(problems) > 0 {
		return network, errors.New(strings.Join(problems, "; "))
	}
	return network, nil
}

const (
	maxInterfaceName = 15 // IFNAMSIZ - 1
	maxBondMembers   = 16 // BondObservation.members' MaxItems
)

var bondModes = []nwv1.BondMode{nwv1.BondModeBalanceRR, nwv1.BondModeActiveBackup, nwv1.BondModeBalanceXOR,
	nwv1.BondModeBroadcast, nwv1.BondMode8023AD, nwv1.BondModeBalanceTLB, nwv1.BondModeBalanceALB}

// storage reads DRBD: nil, and StorageHealthy Unknown saying why, when it cannot.
func (o *HostObserver) storage(ctx context.Context) (*nwv1.DRBDStatus, metav1.Condition) {
	cond := metav1.Condition{Type: nwv1.ConditionStorageHealthy, Status: metav1.ConditionUnknown}
	if o.DRBD == nil {
		cond.Reason, cond.Message = nwv1.ReasonDRBDNotReported, "this agent does not read DRBD"
		return nil, cond
	}
	proc := o.ProcDRBD
	if proc == "" {
		proc = "/proc/drbd"
	}
	if _, err := os.Stat(proc); errors.Is(err, fs.ErrNotExist) {
		cond.Reason, cond.Message = nwv1.ReasonDRBDNotLoaded, "the kernel has no DRBD module loaded ("+proc+" is missing): no DRBD resource to report"
		return nil, cond
	}
	argv := drbd.StatusCommand()
	if len(o.Drbdsetup) > 0 {
		argv = append(append([]string{}, o.Drbdsetup...), argv[1:]...)
	}
	runCtx, cancel := context.WithTimeout(ctx, drbdStatusTimeout)
	defer cancel()
	out, err := o.DRBD.Run(runCtx, argv)
	if err == nil {
		var resources []drbd.Resource
		if resources, err = drbd.ParseStatus(out.Stdout); err == nil {
			return DRBDStatus(resources), storageCondition(resources)
		}
	}
	cond.Reason, cond.Message = nwv1.ReasonDRBDUnreadable, text.Shorten(err.Error(), maxConditionMessage)
	return nil, cond
}

// storageCondition says whether every resource is fully replicated, and if not, why.
func storageCondition(resources []drbd.Resource) metav1.Condition {
	cond := metav1.Condition{Type: nwv1.ConditionStorageHealthy}
	problems := drbd.Problems(resources)
	if len(problems) == 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, nwv1.ReasonDRBDHealthy
		cond.Message = fmt.Sprintf("%d of %d DRBD resources connected and up to date", len(resources), len(resources))
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, nwv1.ReasonDRBDDegraded
	cond.Message = text.Shorten(strings.Join(problems, "; "), maxConditionMessage)
	return cond
}

// DRBDStatus is what the status says of DRBD: the counts over every resource, and the first
// resources (by name) one by one, within the API's bounds.
func DRBDStatus(resources []drbd.Resource) *nwv1.DRBDStatus {
	sorted := slices.Clone(resources)
	slices.SortStableFunc(sorted, func(a, b drbd.Resource) int { return strings.Compare(a.Name, b.Name) })
	st := &nwv1.DRBDStatus{Resources: clampInt32(len(sorted))}
	for _, r := range sorted {
		connected, upToDate := true, true
		for _, c := range r.Connections {
			connected = connected && c.ConnectionState == drbd.ConnectionConnected
		}
		for _, d := range r.Devices {
			upToDate = upToDate && (d.DiskState == drbd.DiskUpToDate || (d.Client && d.DiskState == drbd.DiskDiskless))
		}
		if connected {
			st.Connected++
		}
		if upToDate {
			st.UpToDate++
		}
		if r.Name != "" && len(st.ResourceStatuses) < nwv1.MaxDRBDResourceStatuses {
			st.ResourceStatuses = append(st.ResourceStatuses, resourceStatus(r))
		}
	}
	st.OutOfSyncKiB = clampInt64(drbd.TotalOutOfSyncKiB(sorted))
	return st
}

func resourceStatus(r drbd.Resource) nwv1.DRBDResourceStatus {
	rs := nwv1.DRBDResourceStatus{Name: clip(r.Name, 64), Role: clip(r.Role, 32), Suspended: r.Suspended}
	for _, d := range r.Devices {
		if validVolume(d.Volume) && len(rs.Volumes) < nwv1.MaxDRBDVolumes {
			rs.Volumes = append(rs.Volumes, nwv1.DRBDVolumeStatus{Volume: int32(d.Volume), DiskState: clip(d.DiskState, 32), Client: d.Client, NoQuorum: !d.Quorum})
		}
	}
	for _, c := range r.Connections {
		if len(rs.Peers) == nwv1.MaxDRBDPeers {
			break
		}
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("node-id-%d", c.PeerNodeID)
		}
		peer := nwv1.DRBDPeerStatus{Name: clip(name, 253), ConnectionState: clip(c.ConnectionState, 32), Role: clip(c.PeerRole, 32)}
		for _, p := range c.PeerDevices {
			if !validVolume(p.Volume) || len(peer.Volumes) == nwv1.MaxDRBDVolumes {
				continue
			}
			v := nwv1.DRBDPeerVolumeStatus{Volume: int32(p.Volume), ReplicationState: clip(p.ReplicationState, 32),
				PeerDiskState: clip(p.PeerDiskState, 32), PeerClient: p.PeerClient, OutOfSyncKiB: clampInt64(p.OutOfSyncKiB)}
			if p.ResyncDonePercent != nil && !math.IsNaN(*p.ResyncDonePercent) {
				percent := int32(math.Floor(math.Max(0, math.Min(100, *p.ResyncDonePercent))))
				v.ResyncDonePercent = &percent
			}
			peer.Volumes = append(peer.Volumes, v)
		}
		rs.Peers = append(rs.Peers, peer)
	}
	return rs
}

func validVolume(v int) bool { return v >= 0 && v <= 65535 }

func clampInt32(n int) int32 { return int32(min(n, math.MaxInt32)) }

func clampInt64(n uint64) int64 { return int64(min(n, math.MaxInt64)) }

// clip cuts s to at most limit bytes, on a character boundary.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// withTransitionTimes gives each condition the transition time it had in before when its
// status did not change, and now otherwise, as meta.SetStatusCondition does.
func withTransitionTimes(conds []metav1.Condition, before []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := make([]metav1.Condition, len(conds))
	for i, c := range conds {
		c.LastTransitionTime = now
		if prev := meta.FindStatusCondition(before, c.Type); prev != nil && prev.Status == c.Status {
			c.LastTransitionTime = prev.LastTransitionTime
		}
		out[i] = c
	}
	return out
}
