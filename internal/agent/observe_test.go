package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/hostos"
)

// The real `drbdsetup status --json` answers of internal/drbd/testdata/status.
const (
	connectedSample    = "salt-shaptools-connected.json"
	syncSourceSample   = "salt-shaptools-syncsource-nan.json"
	twoResourcesSample = "ha-cluster-exporter-two-resources.json"
	tiebreakerSample   = "adapted-linstor-disconnected-tiebreaker.json"
)

// drbdsetupAnswers answers `drbdsetup status --json` with the bytes of a sample (or fails as
// told), as the real drbdsetup would on a host with those resources: this kernel has no DRBD
// module, so the real one can only fail here.
type drbdsetupAnswers struct {
	mu     sync.Mutex
	sample string
	// answer, when set, is answered instead of a sample.
	answer []byte
	fail   error
	calls  [][]string
}

func (d *drbdsetupAnswers) set(sample string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sample, d.fail = sample, nil
}

func (d *drbdsetupAnswers) Run(_ context.Context, argv []string) (drbd.Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, argv)
	if d.fail != nil {
		return drbd.Result{ExitCode: 20}, d.fail
	}
	if d.answer != nil {
		return drbd.Result{Stdout: d.answer}, nil
	}
	data, err := os.ReadFile(filepath.Join("..", "drbd", "testdata", "status", d.sample))
	if err != nil {
		return drbd.Result{ExitCode: -1}, err
	}
	return drbd.Result{Stdout: data}, nil
}

// playedBond plays a bond's state, as test/site plays one where the kernel has no bonding
// driver: what the agent does with what a BondObserver reads is under test here.
type playedBond struct {
	mu    sync.Mutex
	bond  nwv1.BondObservation
	err   error
	reads int
}

func (p *playedBond) Bond(_ context.Context, name string) (nwv1.BondObservation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads++
	if p.err != nil {
		return nwv1.BondObservation{}, p.err
	}
	if name != p.bond.Interface {
		return nwv1.BondObservation{}, errors.New("no such bond " + name)
	}
	b := p.bond
	b.Members = append([]nwv1.BondMember(nil), p.bond.Members...)
	return b, nil
}

func (p *playedBond) setMember(name string, up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.bond.Members {
		if p.bond.Members[i].Name == name {
			p.bond.Members[i].Up = up
		}
	}
}

func (p *playedBond) readCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

func activeBackup() *playedBond {
	return &playedBond{bond: nwv1.BondObservation{Interface: "bond0", Mode: nwv1.BondModeActiveBackup,
		Members: []nwv1.BondMember{{Name: "eth1", Up: true}, {Name: "eth2", Up: true}}}}
}

// kairosHost is a Kairos node's files in a temp tree, booted from its passive entry.
func kairosHost(t *testing.T) hostos.Host {
	t.Helper()
	h := hostos.Host{Root: t.TempDir(), Proc: t.TempDir()}
	files := map[string]string{
		"usr/lib/os-release":   "NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\n",
		"etc/kairos-release":   "KAIROS_VERSION=\"v3.4.2\"\nKAIROS_FLAVOR=\"ubuntu\"\nKAIROS_FLAVOR_RELEASE=\"24.04\"\nKAIROS_VARIANT=\"standard\"\nKAIROS_MODEL=\"generic\"\nKAIROS_SOFTWARE_VERSION=\"v1.32.4+k3s1\"\n",
		"run/cos/passive_mode": "1",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(h.Root, name), content)
	}
	if err := os.Symlink("../usr/lib/os-release", filepath.Join(h.Root, "etc", "os-release")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(h.Proc, "cmdline"), "root=LABEL=COS_PASSIVE cos-img/filename=/cOS/passive.img panic=5\n")
	return h
}

// equalJSON compares two values as the API server would store them.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	return string(ja) == string(jb)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadedDRBD is a /proc/drbd, as the kernel shows one while its DRBD module is loaded.
func loadedDRBD(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "drbd")
	writeFile(t, path, "version: 9.2.12 (api:2/proto:86-122)\n")
	return path
}

func condition(t *testing.T, obs agent.Observation, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(obs.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, obs.Conditions)
	}
	return *c
}

func TestObserveDRBDFromRealAnswers(t *testing.T) {
	for _, tc := range []struct {
		sample                         string
		resources, connected, upToDate int32
		outOfSync                      int64
		healthy                        metav1.ConditionStatus
		reason, message                string
		check                          func(t *testing.T, st *nwv1.DRBDStatus)
	}{
		{connectedSample, 1, 1, 1, 0, metav1.ConditionTrue, nwv1.ReasonDRBDHealthy, "1 of 1 DRBD resources connected and up to date",
			func(t *testing.T, st *nwv1.DRBDStatus) {
				want := nwv1.DRBDResourceStatus{Name: "beijing", Role: "Primary",
					Volumes: []nwv1.DRBDVolumeStatus{{Volume: 0, DiskState: "UpToDate"}},
					Peers: []nwv1.DRBDPeerStatus{{Name: "salt-node3", ConnectionState: "Connected", Role: "Secondary",
						Volumes: []nwv1.DRBDPeerVolumeStatus{{Volume: 0, ReplicationState: "Established", PeerDiskState: "UpToDate"}}}}}
				if len(st.ResourceStatuses) != 1 || !equalJSON(t, st.ResourceStatuses[0], want) {
					t.Errorf("resources %+v; want %+v", st.ResourceStatuses, want)
				}
			}},
		{syncSourceSample, 1, 1, 1, 409600, metav1.ConditionFalse, nwv1.ReasonDRBDDegraded,
			"shanghai volume 0: replication with SLE12-sp4-node2 is SyncSource; shanghai volume 0: the disk on SLE12-sp4-node2 is Inconsistent",
			func(t *testing.T, st *nwv1.DRBDStatus) {
				v := st.ResourceStatuses[0].Peers[0].Volumes[0]
				if v.ReplicationState != "SyncSource" || v.PeerDiskState != "Inconsistent" || v.OutOfSyncKiB != 409600 || !equalJSON(t, v.ResyncDonePercent, ptr.To(int32(0))) {
					t.Errorf("the resyncing volume: %+v", v)
				}
			}},
		{twoResourcesSample, 2, 2, 2, 0, metav1.ConditionTrue, nwv1.ReasonDRBDHealthy, "2 of 2 DRBD resources connected and up to date",
			func(t *testing.T, st *nwv1.DRBDStatus) {
				if len(st.ResourceStatuses) != 2 || st.ResourceStatuses[0].Name > st.ResourceStatuses[1].Name {
					t.Errorf("want both resources, by name: %+v", st.ResourceStatuses)
				}
			}},
		{tiebreakerSample, 1, 0, 1, 2048, metav1.ConditionFalse, nwv1.ReasonDRBDDegraded, "the connection to node-b is Connecting",
			func(t *testing.T, st *nwv1.DRBDStatus) {
				peers := st.ResourceStatuses[0].Peers
				if len(peers) != 2 || peers[0].Name != "node-b" || peers[0].ConnectionState != "Connecting" || peers[0].Role != "Unknown" ||
					peers[1].Name != "node-c" || !peers[1].Volumes[0].PeerClient || peers[1].Volumes[0].PeerDiskState != "Diskless" {
					t.Errorf("peers %+v", peers)
				}
			}},
	} {
		t.Run(tc.sample, func(t *testing.T) {
			answers := &drbdsetupAnswers{sample: tc.sample}
			o := &agent.HostObserver{DRBD: answers, ProcDRBD: loadedDRBD(t)}
			obs := o.Observe(context.Background())
			st := obs.Storage
			if st == nil {
				t.Fatalf("no storage reported; conditions %+v", obs.Conditions)
			}
			if st.Resources != tc.resources || st.Connected != tc.connected || st.UpToDate != tc.upToDate || st.OutOfSyncKiB != tc.outOfSync {
				t.Errorf("counts %d/%d/%d, %d KiB; want %d/%d/%d, %d KiB", st.Resources, st.Connected, st.UpToDate, st.OutOfSyncKiB,
					tc.resources, tc.connected, tc.upToDate, tc.outOfSync)
			}
			tc.check(t, st)
			c := condition(t, obs, nwv1.ConditionStorageHealthy)
			if c.Status != tc.healthy || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Errorf("StorageHealthy %s %s %q; want %s %s containing %q", c.Status, c.Reason, c.Message, tc.healthy, tc.reason, tc.message)
			}
			if len(answers.calls) != 1 || strings.Join(answers.calls[0], " ") != "drbdsetup status --json" {
				t.Errorf("ran %v; want drbdsetup status --json once", answers.calls)
			}
		})
	}
}

func TestObserveDRBDAbsentOrUnreadable(t *testing.T) {
	// No module loaded: drbdsetup is not run at all (it would ask modprobe for one).
	answers := &drbdsetupAnswers{sample: connectedSample}
	missing := filepath.Join(t.TempDir(), "drbd")
	obs := (&agent.HostObserver{DRBD: answers, ProcDRBD: missing}).Observe(context.Background())
	c := condition(t, obs, nwv1.ConditionStorageHealthy)
	if obs.Storage != nil || c.Status != metav1.ConditionUnknown || c.Reason != nwv1.ReasonDRBDNotLoaded || !strings.Contains(c.Message, missing) || len(answers.calls) != 0 {
		t.Errorf("no module: storage %+v, %+v, ran %v; want none, Unknown DRBDNotLoaded naming %s, nothing run", obs.Storage, c, answers.calls, missing)
	}

	// An answer that is not drbdsetup's: Unknown, naming what is wrong, not a crash.
	obs = (&agent.HostObserver{DRBD: &drbdsetupAnswers{answer: []byte(`[{"name":"r0","node-id":"one"}]`)}, ProcDRBD: loadedDRBD(t)}).Observe(context.Background())
	c = condition(t, obs, nwv1.ConditionStorageHealthy)
	if obs.Storage != nil || c.Status != metav1.ConditionUnknown || c.Reason != nwv1.ReasonDRBDUnreadable || !strings.Contains(c.Message, "resources[0].node-id") {
		t.Errorf("a bad answer: storage %+v, %+v; want none, Unknown DRBDUnreadable naming resources[0].node-id", obs.Storage, c)
	}

	// The real drbdsetup on this machine, whose kernel has no DRBD module, told that one is
	// loaded: it fails, and the condition quotes it.
	path, err := exec.LookPath("drbdsetup")
	if err != nil {
		path = "/usr/sbin/drbdsetup"
		if _, statErr := os.Stat(path); statErr != nil {
			if os.Getenv("NODEWRIGHT_REQUIRE_DRBD_UTILS") != "" {
				t.Fatalf("drbdsetup is not installed and NODEWRIGHT_REQUIRE_DRBD_UTILS is set: make drbd-utils installs it")
			}
			t.Skip("drbdsetup is not installed (Debian's drbd-utils; make drbd-utils installs it)")
		}
	}
	if _, err := os.Stat("/proc/drbd"); err == nil {
		t.Skip("this kernel has DRBD loaded: drbdsetup would answer")
	}
	real := &agent.HostObserver{DRBD: drbd.ExecRunner{Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}},
		Drbdsetup: []string{path}, ProcDRBD: loadedDRBD(t)}
	obs = real.Observe(context.Background())
	c = condition(t, obs, nwv1.ConditionStorageHealthy)
	if obs.Storage != nil || c.Status != metav1.ConditionUnknown || c.Reason != nwv1.ReasonDRBDUnreadable || !strings.Contains(c.Message, path+" status --json") {
		t.Errorf("the real drbdsetup without a module: storage %+v, %+v; want none, Unknown DRBDUnreadable quoting the command", obs.Storage, c)
	}
	t.Logf("the real drbdsetup here says: %s", c.Message)

	// An agent told to read no DRBD says so.
	obs = (&agent.HostObserver{}).Observe(context.Background())
	if c := condition(t, obs, nwv1.ConditionStorageHealthy); c.Reason != nwv1.ReasonDRBDNotReported {
		t.Errorf("no DRBD reader: %+v", c)
	}
}

func TestObserveBondAndOS(t *testing.T) {
	bond := activeBackup()
	o := &agent.HostObserver{Bond: bond, BondName: "bond0", OS: hostos.Kairos{}, Host: kairosHost(t)}
	obs := o.Observe(context.Background())
	wantNet := &nwv1.NodeNetworkStatus{BondMode: nwv1.BondModeActiveBackup, Bond: &bond.bond}
	if !equalJSON(t, obs.Network, wantNet) {
		t.Errorf("network %+v; want %+v", obs.Network, wantNet)
	}
	wantOS := &nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, Name: "Ubuntu", Version: "24.04", PrettyName: "Ubuntu 24.04.1 LTS",
		Kairos: &nwv1.KairosStatus{BootEntry: nwv1.KairosBootPassive, Version: "v3.4.2", Flavor: "ubuntu", FlavorRelease: "24.04",
			Variant: "standard", Model: "generic", SoftwareVersion: "v1.32.4+k3s1"}}
	if !equalJSON(t, obs.OS, wantOS) {
		t.Errorf("os %+v; want %+v", obs.OS, wantOS)
	}
	if c := condition(t, obs, nwv1.ConditionHostObserved); c.Status != metav1.ConditionTrue || c.Reason != nwv1.ReasonHostObserved ||
		c.Message != "read the OS and the storage bond bond0" {
		t.Errorf("HostObserved %+v", c)
	}

	// The bond cannot be read: no network, and the condition says why.
	bond.err = errors.New("link bond0 not found")
	obs = o.Observe(context.Background())
	c := condition(t, obs, nwv1.ConditionHostObserved)
	if obs.Network != nil || obs.OS == nil || c.Status != metav1.ConditionFalse || c.Reason != nwv1.ReasonBondNotObserved ||
		c.Message != "the storage bond bond0: link bond0 not found" {
		t.Errorf("an unreadable bond: network %+v, os %v, %+v", obs.Network, obs.OS != nil, c)
	}

	// What the API would refuse is left out, and said.
	bond.err = nil
	bond.bond.Mode = "round-robin"
	bond.bond.Members = append(bond.bond.Members, nwv1.BondMember{Name: "a-name-too-long-for-linux", Up: true})
	obs = o.Observe(context.Background())
	c = condition(t, obs, nwv1.ConditionHostObserved)
	if obs.Network == nil || obs.Network.BondMode != "" || obs.Network.Bond.Mode != "" || len(obs.Network.Bond.Members) != 2 ||
		c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, `its mode "round-robin" is not a Linux bonding mode`) ||
		!strings.Contains(c.Message, `a member named "a-name-too-long-for-linux" is not an interface name`) {
		t.Errorf("what the API refuses: network %+v, %+v", obs.Network, c)
	}

	// No OS facts: the OS's kind alone, and the reason; the bond is read still.
	bond.bond.Mode, bond.bond.Members = nwv1.BondModeActiveBackup, bond.bond.Members[:2]
	o.Host = hostos.Host{Root: t.TempDir(), Proc: t.TempDir()}
	obs = o.Observe(context.Background())
	c = condition(t, obs, nwv1.ConditionHostObserved)
	if obs.Network == nil || obs.OS == nil || obs.OS.Kind != nwv1.HostOSKairos || obs.OS.Name != "" ||
		c.Status != metav1.ConditionFalse || c.Reason != nwv1.ReasonOSNotObserved || !strings.Contains(c.Message, "the OS: neither /etc/os-release nor /usr/lib/os-release") {
		t.Errorf("no OS facts: network %+v, os %+v, %+v", obs.Network, obs.OS, c)
	}

	// No bond to watch, no OS reader: nothing read, and nothing wrong.
	obs = (&agent.HostObserver{}).Observe(context.Background())
	if c := condition(t, obs, nwv1.ConditionHostObserved); obs.Network != nil || obs.OS != nil || c.Status != metav1.ConditionTrue {
		t.Errorf("nothing to read: %+v", obs)
	}
}

func TestObserveSaysABondItCannotRead(t *testing.T) {
	// A bond to report, and nothing to read it with.
	obs := (&agent.HostObserver{BondName: "bond0"}).Observe(context.Background())
	if c := condition(t, obs, nwv1.ConditionHostObserved); obs.Network != nil || c.Reason != nwv1.ReasonBondNotObserved ||
		c.Message != "the storage bond bond0: this agent has no way to read a bond yet" {
		t.Errorf("no bond observer: %+v, %+v", obs.Network, c)
	}
}
