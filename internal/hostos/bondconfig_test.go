package hostos

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestBondFilesGolden: the files for each OS are the golden ones, and read back to the mode.
func TestBondFilesGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		p      Provider
		cfg    BondConfig
		path   string
	}{
		{"networkd-dropin", SystemdNetworkd{}, BondConfig{Bond: "bond0", Mode: nwv1.BondMode8023AD, BaseNetdev: "20-bond0.netdev"},
			"/etc/systemd/network/20-bond0.netdev.d/90-nodewright-mode.conf"},
		{"networkd-netdev", SystemdNetworkd{}, BondConfig{Bond: "bond0", Mode: nwv1.BondModeActiveBackup},
			"/etc/systemd/network/10-nodewright-bond0.netdev"},
		{"kairos-dropin", Kairos{}, BondConfig{Bond: "bond0", Mode: nwv1.BondMode8023AD, BaseNetdev: "20-bond0.netdev"},
			"/oem/90_nodewright_bond_bond0.yaml"},
		{"kairos-netdev", Kairos{}, BondConfig{Bond: "storage0", Mode: nwv1.BondModeBalanceALB},
			"/oem/90_nodewright_bond_storage0.yaml"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			files, err := BondFiles(tc.p, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != 1 || files[0].Path != tc.path {
				t.Fatalf("files %+v; want one at %s", files, tc.path)
			}
			golden := filepath.Join("testdata", tc.golden+".golden")
			if *update {
				if err := os.WriteFile(golden, files[0].Content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if !bytes.Equal(files[0].Content, want) {
				t.Errorf("%s differs from %s:\n%s", tc.path, golden, files[0].Content)
			}
			mode, err := ParseBondFiles(tc.p, files)
			if err != nil || mode != tc.cfg.Mode {
				t.Errorf("read back: %q, %v; want %q", mode, err, tc.cfg.Mode)
			}
		})
	}
}

// TestKairosFileIsCloudConfig: the /oem file's first line is what Kairos looks for, and the
// networkd file inside is the one a plain Linux gets.
func TestKairosFileIsCloudConfig(t *testing.T) {
	cfg := BondConfig{Bond: "bond0", Mode: nwv1.BondMode8023AD, BaseNetdev: "20-bond0.netdev"}
	k, _ := BondFiles(Kairos{}, cfg)
	n, _ := BondFiles(SystemdNetworkd{}, cfg)
	if !bytes.HasPrefix(k[0].Content, []byte("#cloud-config\n")) {
		t.Errorf("the Kairos file does not start with #cloud-config:\n%s", k[0].Content)
	}
	if !strings.Contains(string(k[0].Content), "path: "+n[0].Path) {
		t.Errorf("the Kairos file does not write %s:\n%s", n[0].Path, k[0].Content)
	}
}

func TestTalosRefuses(t *testing.T) {
	_, err := BondFiles(Talos{}, BondConfig{Bond: "bond0", Mode: nwv1.BondMode8023AD})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "machine.network") {
		t.Fatalf("Talos: %v; want ErrUnsupported naming machine.network", err)
	}
}

func TestBadBondNames(t *testing.T) {
	for _, name := range []string{"", "../etc", "a/b", "sixteen-chars-xx", ".."} {
		if _, err := BondFiles(SystemdNetworkd{}, BondConfig{Bond: name, Mode: nwv1.BondMode8023AD}); err == nil {
			t.Errorf("bond name %q accepted", name)
		}
	}
}

func TestParseNetworkd(t *testing.T) {
	got, err := ParseNetworkd([]byte("# c\n[NetDev]\nName = bond0\n; c\nKind=bond\n\n[Bond]\nMode=active-backup\nMode=802.3ad\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got["NetDev"]["Name"][0] != "bond0" || strings.Join(got["Bond"]["Mode"], ",") != "active-backup,802.3ad" {
		t.Errorf("parsed %v", got)
	}
	for _, bad := range []string{"Name=x\n", "[NetDev\n", "[]\n", "[A]\nnovalue\n", "[A]\n=v\n", "[A]\nK=a \\\n"} {
		if _, err := ParseNetworkd([]byte(bad)); err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("ParseNetworkd(%q): %v; want an error naming the line", bad, err)
		}
	}
}

func FuzzParseNetworkd(f *testing.F) {
	for _, name := range []string{"networkd-dropin", "networkd-netdev"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name+".golden")); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("[A]\nK=V\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sections, err := ParseNetworkd(b)
		if err != nil {
			return
		}
		for s, keys := range sections {
			if s == "" {
				t.Fatal("an empty section name")
			}
			for k := range keys {
				if k == "" || strings.ContainsAny(k, "\n=") {
					t.Fatalf("key %q", k)
				}
			}
		}
	})
}

func FuzzParseBondFiles(f *testing.F) {
	for _, name := range []string{"kairos-dropin", "kairos-netdev"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name+".golden")); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseBondFiles(Kairos{}, []File{{Path: "/oem/x.yaml", Content: b}})
	})
}

// TestFindBondNetdev: the first .netdev (by name) that defines the bond is found; other
// kinds, other names, broken files and Nodewright's own are passed over.
func TestFindBondNetdev(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, networkDir)
	for name, content := range map[string]string{
		"05-broken.netdev":           "[NetDev\n",
		"10-nodewright-bond0.netdev": "[NetDev]\nName=bond0\nKind=bond\n",
		"15-vlan.netdev":             "[NetDev]\nName=bond0.100\nKind=vlan\n",
		"20-bond0.netdev":            "[NetDev]\nName=bond0\nKind=bond\n[Bond]\nMode=active-backup\n",
		"30-bond0-again.netdev":      "[NetDev]\nName=bond0\nKind=bond\n",
		"20-bond0.network":           "[Match]\nName=bond0\n",
	} {
		if err := WriteFileAtomic(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// netplan writes its files in /run; networkd reads them with /etc's, by name.
	for name, content := range map[string]string{
		"run/systemd/network/10-netplan-bond2.netdev":   "[NetDev]\nName=bond2\nKind=bond\n",
		"usr/lib/systemd/network/20-bond0.netdev":       "[NetDev]\nName=other\nKind=bond\n", // hidden by /etc's
		"usr/lib/systemd/network/25-bond3.netdev":       "[NetDev]\nName=bond3\nKind=bond\n",
		"usr/local/lib/systemd/network/25-bond3.netdev": "[NetDev]\nName=bond4\nKind=bond\n", // hides /usr/lib's
	} {
		if err := WriteFileAtomic(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for bond, want := range map[string]string{"bond0": "20-bond0.netdev", "bond1": "", "bond2": "10-netplan-bond2.netdev", "bond3": "", "bond4": "25-bond3.netdev"} {
		got, err := FindBondNetdev(root, bond)
		if err != nil || got != want {
			t.Errorf("FindBondNetdev(%s) = %q, %v; want %q", bond, got, err, want)
		}
	}
	if got, err := FindBondNetdev(t.TempDir(), "bond0"); err != nil || got != "" {
		t.Errorf("without a network directory: %q, %v", got, err)
	}
}

// TestWriteAndRestore: what ReadFiles kept is what WriteFiles puts back, including absence.
func TestWriteAndRestore(t *testing.T) {
	root := t.TempDir()
	files, _ := BondFiles(SystemdNetworkd{}, BondConfig{Bond: "bond0", Mode: nwv1.BondMode8023AD, BaseNetdev: "20-bond0.netdev"})
	before, err := ReadFiles(root, files)
	if err != nil || len(before) != 1 || before[0].Content != nil {
		t.Fatalf("before: %+v, %v; want one absent file", before, err)
	}
	if err := WriteFiles(root, files); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, files[0].Path)); !bytes.Equal(got, files[0].Content) {
		t.Fatalf("written: %q", got)
	}
	if err := WriteFiles(root, before); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, files[0].Path)); !os.IsNotExist(err) {
		t.Errorf("after the restore the file is still there: %v", err)
	}
	left, _ := os.ReadDir(filepath.Dir(filepath.Join(root, files[0].Path)))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
