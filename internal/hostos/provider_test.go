package hostos

import (
	"slices"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestCapabilities pins every OS's declared capabilities: changing one is a decision, made
// here as well as in the OS's file.
func TestCapabilities(t *testing.T) {
	type caps struct {
		shell, immutable          bool
		configPath                string
		bootRecovery, net, kernel Capability
	}
	want := map[nwv1.HostOSKind]caps{
		nwv1.HostOSKairos: {true, true, "/oem",
			Capability{true, MechanismCommands, "/oem", "boot"},
			Capability{true, MechanismSystemdNetworkd, "/oem", "initramfs"},
			Capability{true, MechanismSysctl, "/oem", "boot"}},
		nwv1.HostOSSystemdNetworkd: {true, false, "/etc",
			Capability{true, MechanismSystemdUnit, "/etc/systemd/system", ""},
			Capability{true, MechanismSystemdNetworkd, "/etc/systemd/network", ""},
			Capability{true, MechanismSysctl, "/etc/sysctl.d", ""}},
		nwv1.HostOSTalos: {false, true, "",
			Capability{},
			Capability{false, MechanismMachineConfig, "machine.network", ""},
			Capability{false, MechanismMachineConfig, "machine.sysctls", ""}},
	}
	for _, p := range All() {
		got := caps{p.SupportsShellHostOps(), p.ImmutableRoot(), p.PersistentConfigPath(),
			p.BootRecovery(), p.PersistentNetworkConfig(), p.KernelTuning()}
		if w, ok := want[p.Kind()]; !ok || got != w {
			t.Errorf("%s: %+v; want %+v", p.Name(), got, w)
		}
	}
}

// TestDeclarationsAgree checks what follows from one capability for another: a supported
// operation needs a shell, says how it is applied, and is written where the OS keeps its
// configuration across reboots.
func TestDeclarationsAgree(t *testing.T) {
	for _, p := range All() {
		for name, c := range map[string]Capability{
			"BootRecovery": p.BootRecovery(), "PersistentNetworkConfig": p.PersistentNetworkConfig(), "KernelTuning": p.KernelTuning(),
		} {
			if !c.Supported {
				continue
			}
			switch {
			case !p.SupportsShellHostOps():
				t.Errorf("%s: %s is supported without shell host operations", p.Name(), name)
			case c.Mechanism == MechanismNone || c.Mechanism == MechanismMachineConfig:
				t.Errorf("%s: %s is supported through %q, which the agent cannot write", p.Name(), name, c.Mechanism)
			case p.PersistentConfigPath() == "" || !inside(c.Path, p.PersistentConfigPath()):
				t.Errorf("%s: %s is written to %q, outside the persistent %q", p.Name(), name, c.Path, p.PersistentConfigPath())
			}
		}
	}
}

func inside(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

func TestForKindCoversTheEnum(t *testing.T) {
	values := testenv.EnumValues(t, "HostOSKind")
	for _, v := range values {
		kind := nwv1.HostOSKind(v)
		p, err := ForKind(kind)
		if err != nil {
			t.Errorf("ForKind(%q): %v", kind, err)
			continue
		}
		if p.Kind() != kind {
			t.Errorf("ForKind(%q) is %s, whose Kind() is %q", kind, p.Name(), p.Kind())
		}
	}
	var kinds []string
	for _, p := range All() {
		kinds = append(kinds, string(p.Kind()))
	}
	if !slices.Equal(kinds, values) {
		t.Errorf("All() has the kinds %v; want one provider per enum value, in the enum's order %v", kinds, values)
	}
}

func TestForKindUnknown(t *testing.T) {
	for _, kind := range []nwv1.HostOSKind{"Ubuntu", "", "kairos"} {
		p, err := ForKind(kind)
		if err == nil {
			t.Errorf("ForKind(%q) = %s; want an error", kind, p.Name())
			continue
		}
		if !strings.Contains(err.Error(), `"`+string(kind)+`"`) {
			t.Errorf("ForKind(%q): error %q does not name the kind", kind, err)
		}
	}
}
