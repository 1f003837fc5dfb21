// Package drbdplay plays, for the agent's tests, the one part of DRBD this machine lacks: the
// kernel module's state of the resources, as `drbdsetup status <resource> --json` prints it.
// drbdadm itself is real: Kernel hands every drbdadm command to a real runner (drbd-utils in its
// dry-run mode, which needs no module) and, once drbdadm accepted a `verify`, plays the online
// verification it would have started: the resource's volumes go VerifyS towards every peer, the
// progress advances by one step at each status read, and the verification ends with what
// Mismatch says it found out of sync (0 by default).
package drbdplay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// Kernel is a drbd.Runner that plays the kernel module's state.
type Kernel struct {
	// Real runs drbdadm.
	Real drbd.Runner
	// VerifySteps is how many status reads a verification lasts; 3 when zero.
	VerifySteps int

	mu        sync.Mutex
	resources map[string]*resource
	mismatch  map[string]uint64
}

type resource struct {
	peers      []string
	verifyLeft int
	steps      int
	outOfSync  uint64
}

// AddResource plays a resource of one volume, connected and UpToDate towards peers.
func (k *Kernel) AddResource(name string, peers ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.resources == nil {
		k.resources = map[string]*resource{}
	}
	k.resources[name] = &resource{peers: peers}
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
		if err == nil && len(argv) >= 2 && argv[len(argv)-2] == "verify" {
			k.startVerify(argv[len(argv)-1])
		}
		return res, err
	case "drbdsetup":
		if len(argv) == 4 && argv[1] == "status" && argv[3] == "--json" {
			return k.status(argv[2])
		}
	}
	return drbd.Result{ExitCode: -1}, fmt.Errorf("the played DRBD does not run %q", argv)
}

func (k *Kernel) startVerify(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
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
}

// status prints the resource as drbdsetup does, moving a verification one step on.
func (k *Kernel) status(name string) (drbd.Result, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.resources[name]
	if r == nil {
		return drbd.Result{Stdout: []byte("[]\n")}, nil
	}
	state, percent := "Established", (*float64)(nil)
	if r.verifyLeft > 0 {
		state = "VerifyS"
		done := 100 * float64(r.steps-r.verifyLeft) / float64(r.steps)
		percent = &done
		r.verifyLeft--
	}
	out := drbd.Resource{Name: name, NodeID: 0, Role: "Secondary",
		Devices: []drbd.Device{{Volume: 0, Minor: 1000, DiskState: "UpToDate", Quorum: true}}}
	for i, peer := range r.peers {
		oos := uint64(0)
		if state == "Established" {
			oos = r.outOfSync
		}
		out.Connections = append(out.Connections, drbd.Connection{PeerNodeID: i + 1, Name: peer, ConnectionState: "Connected", PeerRole: "Secondary",
			PeerDevices: []drbd.PeerDevice{{Volume: 0, ReplicationState: state, PeerDiskState: "UpToDate", OutOfSyncKiB: oos, ResyncDonePercent: percent}}})
	}
	data, err := json.Marshal([]drbd.Resource{out})
	if err != nil {
		return drbd.Result{ExitCode: -1}, err
	}
	return drbd.Result{Stdout: append(data, '\n')}, nil
}
