package hostos

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// tree is a host's files for a test: path (relative to the root) to content; a content
// starting with "->" makes a symbolic link to the rest.
type tree map[string]string

// build writes t into a new root and a new /proc, the files under "proc/" going to the latter.
func (tr tree) build(t *testing.T) Host {
	t.Helper()
	h := Host{Root: t.TempDir(), Proc: t.TempDir()}
	for name, content := range tr {
		dir, rel := h.Root, name
		if p, ok := strings.CutPrefix(name, "proc/"); ok {
			dir, rel = h.Proc, p
		}
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func sample(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "os-release", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// kairosFacts are those of a Kairos standard image on Ubuntu 24.04: Ubuntu's os-release,
// Kairos's variables in kairos-release.
func kairosFacts(entry nwv1.KairosBootEntry) nwv1.HostOSStatus {
	return nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, Name: "Ubuntu", Version: "24.04", PrettyName: "Ubuntu 24.04.1 LTS",
		Kairos: &nwv1.KairosStatus{BootEntry: entry, Version: "v3.4.2", Flavor: "ubuntu", FlavorRelease: "24.04",
			Variant: "standard", Model: "generic", SoftwareVersion: "v1.32.4+k3s1"}}
}

func TestKairosFacts(t *testing.T) {
	ubuntu, release := sample(t, "ubuntu-24.04"), sample(t, "kairos-release-ubuntu-24.04-standard")
	for _, tc := range []struct {
		name string
		tree tree
		want nwv1.HostOSStatus
		err  string // in the error, "" for none
	}{
		{"active, from the sentinel, os-release a relative link", tree{
			"etc/os-release": "->../usr/lib/os-release", "usr/lib/os-release": ubuntu, "etc/kairos-release": release,
			"run/cos/active_mode": "1", "proc/cmdline": activeCmdline,
		}, kairosFacts(nwv1.KairosBootActive), ""},
		{"the sentinel wins over the command line", tree{
			"etc/os-release": ubuntu, "etc/kairos-release": release, "run/cos/passive_mode": "1", "proc/cmdline": activeCmdline,
		}, kairosFacts(nwv1.KairosBootPassive), ""},
		{"a UKI node, from the sentinel alone", tree{
			"etc/os-release": ubuntu, "etc/kairos-release": release, "run/cos/recovery_mode": "1", "run/cos/uki_boot_mode": "1", "proc/cmdline": ukiCmdline,
		}, kairosFacts(nwv1.KairosBootRecovery), ""},
		{"no sentinel: the command line", tree{
			"etc/os-release": ubuntu, "etc/kairos-release": release, "proc/cmdline": recoveryCmdline,
		}, kairosFacts(nwv1.KairosBootRecovery), ""},
		{"no sentinel, a UKI line: no entry", tree{
			"etc/os-release": ubuntu, "etc/kairos-release": release, "proc/cmdline": ukiCmdline,
		}, kairosFacts(""), ""},
		// An absolute link leaves a root mounted in a folder: os-release(5)'s fallback.
		{"os-release an absolute link", tree{
			"etc/os-release": "->/usr/lib/os-release", "usr/lib/os-release": ubuntu, "etc/kairos-release": release,
			"run/cos/active_mode": "1", "proc/cmdline": activeCmdline,
		}, kairosFacts(nwv1.KairosBootActive), ""},
		// Older Kairos: its variables in os-release, no kairos-release.
		{"older Kairos", tree{
			"etc/os-release": "NAME=\"kairos-core-opensuse-leap\"\nVERSION_ID=\"v2.4.2\"\nID=kairos\nKAIROS_VERSION=\"v2.4.2\"\nKAIROS_FLAVOR=opensuse\nKAIROS_FLAVOR_RELEASE=leap-15.5\nKAIROS_VARIANT=core\nKAIROS_MODEL=generic\n",
			"proc/cmdline":   passiveCmdline,
		}, nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, Name: "kairos-core-opensuse-leap", Version: "v2.4.2",
			Kairos: &nwv1.KairosStatus{BootEntry: nwv1.KairosBootPassive, Version: "v2.4.2", Flavor: "opensuse", FlavorRelease: "leap-15.5", Variant: "core", Model: "generic"}}, ""},
		// What can be read is reported beside what could not.
		{"a broken kairos-release", tree{
			"etc/os-release": ubuntu, "etc/kairos-release": "KAIROS_VERSION=\"v3\n", "run/cos/active_mode": "1", "proc/cmdline": activeCmdline,
		}, nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, Name: "Ubuntu", Version: "24.04", PrettyName: "Ubuntu 24.04.1 LTS",
			Kairos: &nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive}}, "/etc/kairos-release: line 1: the value of KAIROS_VERSION: the double quote is not closed"},
		{"no os-release", tree{
			"etc/kairos-release": release, "run/cos/active_mode": "1", "proc/cmdline": activeCmdline,
		}, nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, Kairos: kairosFacts(nwv1.KairosBootActive).Kairos}, "neither /etc/os-release nor /usr/lib/os-release is on the host"},
		{"two sentinels", tree{
			"etc/os-release": ubuntu, "etc/kairos-release": release, "run/cos/active_mode": "1", "run/cos/passive_mode": "1", "proc/cmdline": activeCmdline,
		}, kairosFacts(""), "/run/cos holds the sentinels of [Active Passive] at once"},
		{"no command line", tree{
			"etc/os-release": ubuntu, "etc/kairos-release": release,
		}, kairosFacts(""), "the boot entry: the kernel command line:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Kairos{}.Facts(tc.tree.build(t))
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Facts: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Facts error %v; want one containing %q", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Facts =\n %+v %+v\nwant\n %+v %+v", got, got.Kairos, tc.want, tc.want.Kairos)
			}
		})
	}
}

func TestReleaseFacts(t *testing.T) {
	debian := tree{"etc/os-release": "->../usr/lib/os-release", "usr/lib/os-release": sample(t, "debian-12")}.build(t)
	got, err := SystemdNetworkd{}.Facts(debian)
	want := nwv1.HostOSStatus{Kind: nwv1.HostOSSystemdNetworkd, Name: "Debian GNU/Linux", Version: "12", PrettyName: "Debian GNU/Linux 12 (bookworm)"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("SystemdNetworkd.Facts = %+v, %v; want %+v", got, err, want)
	}
	talos := tree{"etc/os-release": sample(t, "talos-1.9")}.build(t)
	got, err = Talos{}.Facts(talos)
	want = nwv1.HostOSStatus{Kind: nwv1.HostOSTalos, Name: "Talos", Version: "v1.9.0", PrettyName: "Talos (v1.9.0)"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Talos.Facts = %+v, %v; want %+v", got, err, want)
	}
	// A value longer than the API admits is cut, on a character boundary.
	long := tree{"etc/os-release": "NAME=\"" + strings.Repeat("é", 100) + "\"\nPRETTY_NAME=" + strings.Repeat("x", 300) + "\n"}.build(t)
	got, err = SystemdNetworkd{}.Facts(long)
	if err != nil || len(got.Name) != 128 || got.Name != strings.Repeat("é", 64) || len(got.PrettyName) != 256 {
		t.Errorf("long values: name %d bytes %q, pretty name %d bytes, %v; want 128 and 256", len(got.Name), got.Name, len(got.PrettyName), err)
	}
	// Nothing to read: the kind alone, and an error naming both files.
	got, err = SystemdNetworkd{}.Facts(Host{Root: t.TempDir(), Proc: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "neither /etc/os-release nor /usr/lib/os-release") || !reflect.DeepEqual(got, nwv1.HostOSStatus{Kind: nwv1.HostOSSystemdNetworkd}) {
		t.Errorf("no os-release: %+v, %v", got, err)
	}
}

// TestFactsOfThisMachine reads this machine's own files, as the agent does on a host.
func TestFactsOfThisMachine(t *testing.T) {
	data, err := os.ReadFile("/etc/os-release")
	if err != nil {
		t.Skipf("this machine has no /etc/os-release: %v", err)
	}
	vars, err := ParseOSRelease(data)
	if err != nil {
		t.Fatalf("this machine's /etc/os-release: %v", err)
	}
	got, err := SystemdNetworkd{}.Facts(Host{Root: "/"})
	if err != nil || got.Name != vars["NAME"] || got.Version != vars["VERSION_ID"] || got.PrettyName != vars["PRETTY_NAME"] {
		t.Errorf("Facts(/) = %+v, %v; want what /etc/os-release says: %v", got, err, vars)
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name string
		tree tree
		want nwv1.HostOSKind
	}{
		{"kairos-release", tree{"etc/os-release": sample(t, "ubuntu-24.04"), "etc/kairos-release": sample(t, "kairos-release-hadron-core")}, nwv1.HostOSKairos},
		{"ID=kairos", tree{"etc/os-release": "NAME=kairos\nID=kairos\n"}, nwv1.HostOSKairos},
		{"KAIROS_ variables in os-release", tree{"etc/os-release": "NAME=x\nKAIROS_VERSION=v2.4.2\n"}, nwv1.HostOSKairos},
		{"Talos", tree{"etc/os-release": sample(t, "talos-1.9")}, nwv1.HostOSTalos},
		{"Ubuntu", tree{"usr/lib/os-release": sample(t, "ubuntu-24.04")}, nwv1.HostOSSystemdNetworkd},
		{"Debian", tree{"etc/os-release": sample(t, "debian-12")}, nwv1.HostOSSystemdNetworkd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Detect(tc.tree.build(t))
			if err != nil || p.Kind() != tc.want {
				t.Errorf("Detect = %v, %v; want %s", p, err, tc.want)
			}
		})
	}
	if p, err := Detect(Host{Root: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "telling the host's OS: neither") {
		t.Errorf("Detect with no os-release = %v, %v; want an error saying so", p, err)
	}
}
