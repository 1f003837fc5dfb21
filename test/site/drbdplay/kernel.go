// Package drbdplay plays, for the agent's tests, the one part of DRBD this machine lacks: the
// kernel module's state of the resources, as `drbdsetup status <resource> --json` prints it.
// drbdadm itself is real: Kernel hands every drbdadm command to a real runner (drbd-utils in its
// dry-run mode, which needs no module) and, once drbdadm accepted it, plays what the command
// would have done:
//
//   - `verify`: the resource's volumes go VerifyS towards every peer, the progress advances by
//     one step at each status read, and the verification ends with what Mismatch (or the file
//     MismatchFile in FaultDir) says it found out of sync (0 by default);
//   - `pause-sync` and `resume-sync` of a resource towards a peer: the pause flag.
//
// Kernel also streams `drbdsetup events2` (events2.go): the dump of the played state, then
// each change in drbdsetup's own format, as a real agent follows it.
//
// With Links, the connections are played on the storage network (links.go): a peer the node
// cannot reach is Connecting, and a connection found again resynchronises for SyncTime of
// unpaused time. The side that lost every peer of the resource while apart is the SyncTarget
// (its disk Inconsistent until the resync ends), the other the SyncSource (its peer's disk
// Inconsistent); of two nodes that lost each other, the one with the greater name is the
// target. The pause flag of the source holds the resync on both sides (the link carries it).
// Without Links every connection is Connected and in sync.
//
// With ConfigDir, the resources follow the resource files there as LINSTOR's satellite writes
// and removes them (resfiles.go): a replica placed, moved or removed while the node runs.
package drbdplay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// Kernel is a drbd.Runner that plays the kernel module's state.
type Kernel struct {
	// Real runs drbdadm.
	Real drbd.Runner
	// VerifySteps is how many status reads a verification lasts; 3 when zero.
	VerifySteps int
	// Self is this node's name; Links its played connections (nil: always connected).
	Self  string
	Links *Links
	// SyncTime is how long a resynchronisation lasts, paused time not counted; 2 s when zero.
	SyncTime time.Duration
	// FaultDir, when set, holds the fault hook StandAloneFile: the peers listed in it, one per
	// line, are StandAlone (a connection DRBD gave up, as after a split brain) whatever the
	// network carries.
	FaultDir string
	// ConfigDir, when set, holds the resource files (*.res) the resources follow, read again
	// before each command (resfiles.go): a file naming Self places its resource here, towards
	// the other hosts it names. Resources added by AddResource that no file names stay.
	ConfigDir string

	mu        sync.Mutex
	resources map[string]*resource
	mismatch  map[string]uint64
	files     map[string]*resFile
	// streams are the events2 streams open (events2.go), each woken when a command may have
	// changed the state.
	streamsMu sync.Mutex
	streams   map[chan struct{}]bool
	// pass is the fault hook's StandAlone peers during one read of the state (readPass).
	pass map[string]bool
	// reads counts the reads of one resource's status (Reads).
	reads int
}

type resource struct {
	peers      []string
	verifyLeft int
	steps      int
	outOfSync  uint64
	links      map[string]*link
	// fromFile: a resource file of ConfigDir placed it, and removing the file drops it.
	fromFile bool
	// diskless are the hosts, this one or peers, that hold it without a disk.
	diskless map[string]bool
}

// link is the played state of a resource's connection to one peer.
type link struct {
	// down: the peer was not reachable at the last read; isolated: nor was any other peer.
	down, isolated bool
	// paused: this node paused the resync towards the peer (drbdadm pause-sync).
	paused bool
	// target: this node is the resync's target; left: the resync time left; tick: the last
	// read.
	target bool
	left   time.Duration
	tick   time.Time
}

// AddResource plays a resource of one volume, connected and UpToDate towards peers.
func (k *Kernel) AddResource(name string, peers ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.resources == nil {
		k.resources = map[string]*resource{}
	}
	r := &resource{peers: peers, links: map[string]*link{}}
	for _, p := range peers {
		r.links[p] = &link{}
	}
	k.resources[name] = r
	k.wake()
}

// PausedTowards lists the resources whose resynchronisation this node paused towards peer.
func (k *Kernel) PausedTowards(peer string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for name, r := range k.resources {
		if l := r.links[peer]; l != nil && l.paused {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Mismatch is the fault hook: the next verification of the resource finds kib out of sync.
func (k *Kernel) Mismatch(name string, kib uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mismatch == nil {
		k.mismatch = map[string]uint64{}
	}
	k.mismatch[name] = kib
}

// Run runs drbdadm for real and answers drbdsetup status from the played state.
func (k *Kernel) Run(ctx context.Context, argv []string) (drbd.Result, error) {
	if len(argv) == 0 {
		return drbd.Result{ExitCode: -1}, fmt.Errorf("no command")
	}
	switch filepath.Base(argv[0]) {
	case "drbdadm":
		res, err := k.Real.Run(ctx, argv)
		defer k.wake()
		if err == nil && len(argv) >= 2 {
			switch cmd, arg := argv[len(argv)-2], argv[len(argv)-1]; cmd {
			case "verify":
				k.startVerify(arg)
			case "pause-sync", "resume-sync":
				name, peer, _ := strings.Cut(arg, ":")
				k.setPaused(name, peer, cmd == "pause-sync")
			}
		}
		return res, err
	case "drbdsetup":
		// A read moves a verification on: the streams see its end.
		defer k.wake()
		switch {
		case len(argv) == 4 && argv[1] == "status" && argv[3] == "--json":
			return k.status(argv[2])
		case len(argv) == 3 && argv[1] == "status" && argv[2] == "--json":
			return k.statusAll()
		}
	}
	return drbd.Result{ExitCode: -1}, fmt.Errorf("the played DRBD does not run %q", argv)
}

func (k *Kernel) startVerify(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.syncConfig()
	r := k.resources[name]
	if r == nil {
		return
	}
	r.steps = k.VerifySteps
	if r.steps == 0 {
		r.steps = 3
	}
	r.verifyLeft, r.outOfSync = r.steps, k.mismatch[name]
	delete(k.mismatch, name)
	if kib, ok := k.mismatchFile(name); ok {
		r.outOfSync = kib
	}
}

// MismatchFile is the fault hook's file in FaultDir for a process of its own (the agent built
// for the local site): each line "<resource> <KiB>" makes every verification of the resource
// find that much out of sync.
const MismatchFile = "mismatch"

// mismatchFile is what the fault hook's file says a verification of name finds.
func (k *Kernel) mismatchFile(name string) (uint64, bool) {
	if k.FaultDir == "" {
		return 0, false
	}
	raw, err := os.ReadFile(filepath.Join(k.FaultDir, MismatchFile))
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) != 2 || f[0] != name {
			continue
		}
		if kib, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			return kib, true
		}
	}
	return 0, false
}

func (k *Kernel) setPaused(name, peer string, paused bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.syncConfig()
	if r := k.resources[name]; r != nil && r.links[peer] != nil {
		r.links[peer].paused = paused
	}
}

// status prints the resource as drbdsetup does, moving a verification one step on and each
// resynchronisation on by the time since the last read.
func (k *Kernel) status(name string) (drbd.Result, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.syncConfig()
	defer k.readPass()()
	k.reads++
	var out []drbd.Resource
	if r := k.resources[name]; r != nil {
		out = append(out, k.resourceStatus(name, r))
	}
	return marshal(out)
}

// Reads is how many times a resource's status was read (`drbdsetup status <resource>`), each
// read moving a verification one step on: a test tells by it that the agent read the state.
func (k *Kernel) Reads() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reads
}

// statusAll prints every resource, by name, as `drbdsetup status --json` does.
func (k *Kernel) statusAll() (drbd.Result, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.syncConfig()
	defer k.readPass()()
	out := []drbd.Resource{}
	for _, name := range slices.Sorted(maps.Keys(k.resources)) {
		out = append(out, k.resourceStatus(name, k.resources[name]))
	}
	return marshal(out)
}

func marshal(out []drbd.Resource) (drbd.Result, error) {
	if out == nil {
		out = []drbd.Resource{}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return drbd.Result{ExitCode: -1}, err
	}
	return drbd.Result{Stdout: append(data, '\n')}, nil
}

// resourceStatus is the resource r's state now, a verification moved one step on; the caller
// holds k.mu.
func (k *Kernel) resourceStatus(name string, r *resource) drbd.Resource {
	out, _ := k.resourceState(name, r, true)
	return out
}

// resourceState is the resource r's state now and each peer's pause flags as drbdsetup prints
// them (resync-suspended); step moves a verification one step on. The caller holds k.mu.
func (k *Kernel) resourceState(name string, r *resource, step bool) (drbd.Resource, map[string]string) {
	state, percent := "Established", (*float64)(nil)
	if r.verifyLeft > 0 {
		state = "VerifyS"
		done := 100 * float64(r.steps-r.verifyLeft) / float64(r.steps)
		percent = &done
		if step {
			r.verifyLeft--
		}
	}
	flags := map[string]string{}
	k.playLinks(name, r)
	out := drbd.Resource{Name: name, NodeID: 0, Role: "Secondary",
		Devices: []drbd.Device{{Volume: 0, Minor: 1000, DiskState: "UpToDate", Quorum: true}},
		// drbdsetup prints an empty list for a resource with no peer, never null.
		Connections: []drbd.Connection{}}
	for i, peer := range r.peers {
		oos := uint64(0)
		if state == "Established" {
			oos = r.outOfSync
		}
		c := drbd.Connection{PeerNodeID: i + 1, Name: peer, ConnectionState: "Connected", PeerRole: "Secondary",
			PeerDevices: []drbd.PeerDevice{{Volume: 0, ReplicationState: state, PeerDiskState: "UpToDate", OutOfSyncKiB: oos, ResyncDonePercent: percent}}}
		switch l := r.links[peer]; {
		case k.standAlone(peer):
			c.ConnectionState, c.PeerRole = "StandAlone", "Unknown"
			c.PeerDevices[0] = drbd.PeerDevice{Volume: 0, ReplicationState: "Off", PeerDiskState: "DUnknown"}
		case l.down:
			c.ConnectionState, c.PeerRole = "Connecting", "Unknown"
			c.PeerDevices[0] = drbd.PeerDevice{Volume: 0, ReplicationState: "Off", PeerDiskState: "DUnknown"}
		case l.left > 0:
			done := 100 * (1 - float64(l.left)/float64(k.syncTime()))
			pd := &c.PeerDevices[0]
			pd.ResyncDonePercent, pd.OutOfSyncKiB = &done, uint64(l.left/time.Millisecond)
			pd.ReplicationState, pd.PeerDiskState = "SyncSource", "Inconsistent"
			if l.target {
				pd.ReplicationState, pd.PeerDiskState = "SyncTarget", "UpToDate"
				out.Devices[0].DiskState = "Inconsistent"
			}
			if k.pausedLink(name, peer, l) {
				pd.ReplicationState = "Paused" + strings.TrimPrefix(pd.ReplicationState, "Sync")
				pd.ReplicationState = strings.Replace(pd.ReplicationState, "PausedSource", "PausedSyncS", 1)
				pd.ReplicationState = strings.Replace(pd.ReplicationState, "PausedTarget", "PausedSyncT", 1)
			}
		}
		var flag []string
		if l := r.links[peer]; l.paused {
			flag = append(flag, "user")
		}
		if l := r.links[peer]; l.target && k.Links != nil && k.Links.PeerPaused(peer, name) {
			flag = append(flag, "peer")
		}
		flags[peer] = "no"
		if len(flag) > 0 {
			flags[peer] = strings.Join(flag, ",")
		}
		if r.diskless[peer] && c.ConnectionState == "Connected" {
			// A diskless peer has no disk to resynchronise or verify.
			c.PeerDevices[0] = drbd.PeerDevice{Volume: 0, ReplicationState: "Established", PeerDiskState: "Diskless", PeerClient: true}
		}
		out.Connections = append(out.Connections, c)
	}
	if r.diskless[k.Self] {
		out.Devices[0].DiskState, out.Devices[0].Client = "Diskless", true
	}
	return out, flags
}

func (k *Kernel) syncTime() time.Duration {
	if k.SyncTime > 0 {
		return k.SyncTime
	}
	return 2 * time.Second
}

// pausedLink reports whether the resync on l is held: by this node's pause flag when it is the
// source, by the source's (which the link carries) when it is the target.
func (k *Kernel) pausedLink(name, peer string, l *link) bool {
	if !l.target {
		return l.paused
	}
	return k.Links != nil && k.Links.PeerPaused(peer, name)
}

// playLinks moves each connection of r on: down while the peer is out of reach, a resync
// started when it is reached again, run down by the unpaused time since the last read.
func (k *Kernel) playLinks(name string, r *resource) {
	if k.Links == nil {
		return
	}
	now := time.Now()
	up := map[string]bool{}
	anyUp := false
	for _, p := range r.peers {
		up[p] = k.Links.Connected(p)
		anyUp = anyUp || up[p]
	}
	for _, p := range r.peers {
		l := r.links[p]
		switch {
		case !up[p]:
			if !l.down {
				l.down, l.isolated = true, true
			}
			l.isolated = l.isolated && !anyUp
			l.left = 0
		case l.down:
			l.down, l.left, l.tick = false, k.syncTime(), now
			// Of two nodes that lost each other, the greater name is the target.
			l.target = l.isolated && (len(r.peers) > 1 || k.Self > p)
		case l.left > 0:
			if !k.pausedLink(name, p, l) {
				l.left -= now.Sub(l.tick)
			}
			l.tick = now
			if l.left < 0 {
				l.left = 0
			}
		}
	}
}

// StandAloneFile is the fault hook's file in FaultDir.
const StandAloneFile = "standalone"

// standAlone reports whether the fault hook makes the connection to peer StandAlone; the
// caller holds k.mu. Within one read of the state (k.pass) the file is read once.
func (k *Kernel) standAlone(peer string) bool {
	if k.pass != nil {
		return k.pass[peer]
	}
	return k.standAlonePeers()[peer]
}

// standAlonePeers are the peers the fault hook's file lists.
func (k *Kernel) standAlonePeers() map[string]bool {
	if k.FaultDir == "" {
		return nil
	}
	raw, err := os.ReadFile(filepath.Join(k.FaultDir, StandAloneFile))
	if err != nil {
		return map[string]bool{}
	}
	out := map[string]bool{}
	for _, p := range strings.Fields(string(raw)) {
		out[p] = true
	}
	return out
}

// readPass reads the fault hook once for a read of every resource's state; the caller holds
// k.mu and calls the function returned when done.
func (k *Kernel) readPass() func() {
	k.pass = k.standAlonePeers()
	if k.pass == nil {
		k.pass = map[string]bool{}
	}
	return func() { k.pass = nil }
}
