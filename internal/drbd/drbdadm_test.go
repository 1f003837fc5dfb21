package drbd

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// These tests hand the commands the builders make to the real drbdadm, in its dry-run mode
// (-d), against LINSTOR-shaped resource files (testdata/drbd), and compare the drbdsetup
// command lines it would run with what DRBD 9 expects. No kernel module is needed: drbd-utils'
// own tests run drbdadm so, with the module's version given in DRBD_DRIVER_VERSION_OVERRIDE,
// the host it should pretend to be in __DRBD_NODE__, and the kernel's running configuration
// read from FAKE_DRBDSETUP_SHOW instead of from `drbdsetup show`.

// requireDrbdUtils is the variable `make test` sets so that a machine without drbd-utils fails
// these tests instead of skipping them.
const requireDrbdUtils = "NODEWRIGHT_REQUIRE_DRBD_UTILS"

// driverVersion is the DRBD kernel module drbdadm is told it talks to.
const driverVersion = "9.2.12"

// nothingRunning is the running configuration of a node where no resource is up.
const nothingRunning = os.DevNull

func findDrbdadm(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath(Drbdadm); err == nil {
		return path
	}
	// Debian installs it in /usr/sbin, which an unprivileged user's PATH may lack.
	for _, path := range []string{"/usr/sbin/drbdadm", "/sbin/drbdadm"} {
		if info, err := os.Stat(path); err == nil && info.Mode()&0o111 != 0 {
			return path
		}
	}
	if os.Getenv(requireDrbdUtils) != "" {
		t.Fatalf("drbdadm is not installed and %s is set: install Debian's drbd-utils (hack/drbd-utils.sh, or make drbd-utils)", requireDrbdUtils)
	}
	t.Skipf("drbdadm is not installed (Debian's drbd-utils; make drbd-utils installs it); set %s=1 to make this a failure", requireDrbdUtils)
	return ""
}

// dryRun gives argv, as a builder made it, to the drbdadm at drbdadm in its dry-run mode, on
// the node named node, whose kernel runs the configuration in runningConfig, and returns the
// command lines drbdadm printed.
func dryRun(t *testing.T, drbdadm string, argv []string, node, runningConfig string) ([]string, error) {
	t.Helper()
	if len(argv) == 0 || argv[0] != Drbdadm {
		t.Fatalf("argv %q does not run drbdadm", argv)
	}
	conf, err := filepath.Abs(filepath.Join("testdata", "drbd", "drbd.conf"))
	if err != nil {
		t.Fatal(err)
	}
	runner := ExecRunner{Env: []string{
		"PATH=" + os.Getenv("PATH"),
		"LC_ALL=C",
		"DRBD_DRIVER_VERSION_OVERRIDE=" + driverVersion,
		"__DRBD_NODE__=" + node,
		// Always set, so that drbdadm never runs the real `drbdsetup show`.
		"FAKE_DRBDSETUP_SHOW=" + runningConfig,
	}}
	dryArgv := append([]string{drbdadm, "-d", "-c", conf}, argv[1:]...)
	result, err := runner.Run(context.Background(), dryArgv)
	var lines []string
	for _, line := range strings.Split(string(result.Stdout), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			// drbdadm prints the tools by the path it found them at; the command is the point.
			lines = append(lines, strings.TrimPrefix(strings.TrimPrefix(line, "/usr/sbin/"), "/sbin/"))
		}
	}
	return lines, err
}

func running(name string) string {
	return filepath.Join("testdata", "drbd", "running", name)
}

func TestDrbdadmRunsTheExpectedDrbdsetupCommands(t *testing.T) {
	drbdadm := findDrbdadm(t)
	const (
		r3 = threeNodeResource // node-a (node-id 0) and node-b (1) with disks, node-c (2) a diskless tiebreaker
		r2 = twoVolumeResource // node-a (0) and node-b (1), volumes 0 and 1
	)
	must := func(argv []string, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return argv
	}
	cases := []struct {
		name    string
		node    string
		argv    []string
		running string
		want    []string
	}{
		{
			name: "pause-sync towards a diskful peer: peer node-id 1, volume 0",
			node: "node-a", argv: must(PauseSyncCommand(r3, "node-b")), running: nothingRunning,
			want: []string{"drbdsetup pause-sync " + r3 + " 1 0"},
		},
		{
			name: "resume-sync towards the same peer",
			node: "node-a", argv: must(ResumeSyncCommand(r3, "node-b")), running: nothingRunning,
			want: []string{"drbdsetup resume-sync " + r3 + " 1 0"},
		},
		{
			name: "pause-sync towards the tiebreaker",
			node: "node-a", argv: must(PauseSyncCommand(r3, "node-c")), running: nothingRunning,
			want: []string{"drbdsetup pause-sync " + r3 + " 2 0"},
		},
		{
			name: "pause-sync from the other side of the connection",
			node: "node-b", argv: must(PauseSyncCommand(r3, "node-a")), running: nothingRunning,
			want: []string{"drbdsetup pause-sync " + r3 + " 0 0"},
		},
		{
			name: "pause-sync of a resource with two volumes pauses both",
			node: "node-a", argv: must(PauseSyncCommand(r2, "node-b")), running: nothingRunning,
			want: []string{"drbdsetup pause-sync " + r2 + " 1 0", "drbdsetup pause-sync " + r2 + " 1 1"},
		},
		{
			name: "resume-sync of a resource with two volumes resumes both",
			node: "node-b", argv: must(ResumeSyncCommand(r2, "node-a")), running: nothingRunning,
			want: []string{"drbdsetup resume-sync " + r2 + " 0 0", "drbdsetup resume-sync " + r2 + " 0 1"},
		},
		{
			// drbdadm verifies against every peer, the diskless tiebreaker included.
			name: "verify runs against every peer device",
			node: "node-a", argv: must(VerifyCommand(r3)), running: nothingRunning,
			want: []string{"drbdsetup verify " + r3 + " 1 0", "drbdsetup verify " + r3 + " 2 0"},
		},
		{
			name: "verify of a resource with two volumes",
			node: "node-b", argv: must(VerifyCommand(r2)), running: nothingRunning,
			want: []string{"drbdsetup verify " + r2 + " 0 0", "drbdsetup verify " + r2 + " 0 1"},
		},
		{
			name: "adjust of a resource the kernel runs as configured does nothing",
			node: "node-a", argv: must(AdjustCommand(r3)), running: running("pvc-4f6d0c1e-in-sync.txt"),
			want: nil,
		},
		{
			name: "adjust adds the tiebreaker LINSTOR added and changes the verify-alg it changed",
			node: "node-a", argv: must(AdjustCommand(r3)), running: running("pvc-4f6d0c1e-drifted.txt"),
			want: []string{
				"drbdsetup new-peer " + r3 + " 2 --_name=node-c --verify-alg=crct10dif --rr-conflict=retry-connect --shared-secret=Qm9ndXNTZWNyZXRGb3JUZXN0 --cram-hmac-alg=sha1",
				"drbdsetup new-path " + r3 + " 2 ipv4:10.10.0.11:7000 ipv4:10.10.0.13:7000",
				"drbdsetup net-options " + r3 + " 1 --set-defaults --_name=node-b --verify-alg=crct10dif --rr-conflict=retry-connect --shared-secret=Qm9ndXNTZWNyZXRGb3JUZXN0 --cram-hmac-alg=sha1",
				"drbdsetup peer-device-options " + r3 + " 2 0 --set-defaults --bitmap=no",
				"drbdsetup connect " + r3 + " 2",
			},
		},
		{
			name: "adjust of a resource that is down brings it up",
			node: "node-a", argv: must(AdjustCommand(r2)), running: nothingRunning,
			want: []string{
				"drbdsetup new-resource " + r2 + " 0 --on-no-data-accessible=suspend-io --on-no-quorum=suspend-io --on-suspended-primary-outdated=force-secondary --quorum=off",
				"drbdsetup new-minor " + r2 + " 1001 0",
				"drbdsetup new-minor " + r2 + " 1002 1",
				"drbdsetup new-peer " + r2 + " 1 --_name=node-b --verify-alg=crct10dif --protocol=C --shared-secret=U2Vjb25kVGVzdFNlY3JldA --cram-hmac-alg=sha1",
				"drbdsetup new-path " + r2 + " 1 ipv4:10.10.0.11:7001 ipv4:10.10.0.12:7001",
				"drbdmeta 1001 v09 /dev/vg-nodewright/" + r2 + "_00000 internal apply-al",
				"drbdsetup attach 1001 /dev/vg-nodewright/" + r2 + "_00000 /dev/vg-nodewright/" + r2 + "_00000 internal --discard-zeroes-if-aligned=yes",
				"drbdmeta 1002 v09 /dev/vg-nodewright/" + r2 + "_00001 internal apply-al",
				"drbdsetup attach 1002 /dev/vg-nodewright/" + r2 + "_00001 /dev/vg-nodewright/" + r2 + "_00001 internal --discard-zeroes-if-aligned=yes",
				"drbdsetup connect " + r2 + " 1",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dryRun(t, drbdadm, tc.argv, tc.node, tc.running)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("drbdadm %s on %s would run:\n%s\nwant:\n%s", strings.Join(tc.argv[1:], " "), tc.node,
					strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// "all" and "minor-<n>" are names the API's pattern admits and drbdadm reads as something
// else: every resource, and a device by its minor number. drbdadm shows what they would have
// touched; the builders refuse both.
func TestDrbdadmReadsTheNamesTheBuildersRefuse(t *testing.T) {
	drbdadm := findDrbdadm(t)
	everyResource, err := dryRun(t, drbdadm, []string{Drbdadm, "verify", "all"}, "node-a", nothingRunning)
	if err != nil {
		t.Fatal(err)
	}
	wantEvery := []string{
		"drbdsetup verify " + threeNodeResource + " 1 0",
		"drbdsetup verify " + threeNodeResource + " 2 0",
		"drbdsetup verify " + twoVolumeResource + " 1 0",
		"drbdsetup verify " + twoVolumeResource + " 1 1",
	}
	if !reflect.DeepEqual(everyResource, wantEvery) {
		t.Fatalf("drbdadm verify all would run %q, want %q", everyResource, wantEvery)
	}
	oneDevice, err := dryRun(t, drbdadm, []string{Drbdadm, "verify", "minor-1002"}, "node-a", nothingRunning)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"drbdsetup verify " + twoVolumeResource + " 1 1"}; !reflect.DeepEqual(oneDevice, want) {
		t.Fatalf("drbdadm verify minor-1002 would run %q, want %q", oneDevice, want)
	}
	for _, name := range []string{"all", "minor-1002"} {
		if argv, err := VerifyCommand(name); err == nil {
			t.Errorf("VerifyCommand(%q) built %q", name, argv)
		}
	}
}

// A peer name the API admits but the resource file does not know, or the node itself, is
// drbdadm's to refuse: the command fails and its error says why.
func TestDrbdadmRefusesAPeerItDoesNotKnow(t *testing.T) {
	drbdadm := findDrbdadm(t)
	cases := map[string]string{
		"node-z": "Not a valid connection (" + threeNodeResource + ":node-z) for this host",
		"node-a": "Host name 'node-a' (from '" + threeNodeResource + ":node-a') is not a peer, but the local node",
	}
	for peer, complaint := range cases {
		argv, err := PauseSyncCommand(threeNodeResource, peer)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := dryRun(t, drbdadm, argv, "node-a", nothingRunning)
		var commandErr *CommandError
		if !errors.As(err, &commandErr) || commandErr.ExitCode == 0 {
			t.Fatalf("pause-sync towards %s: err %v, want a failed command", peer, err)
		}
		if len(lines) != 0 {
			t.Errorf("pause-sync towards %s would still run %q", peer, lines)
		}
		if !strings.Contains(err.Error(), complaint) {
			t.Errorf("pause-sync towards %s: error %q does not quote drbdadm's %q", peer, err, complaint)
		}
	}
}
