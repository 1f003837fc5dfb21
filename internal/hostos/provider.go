// Package hostos is the host operating system seam: which host operations the agent can
// perform on each OS, and where they must be written to persist, declared as constants of its
// Go type and never probed live. The agent asks a provider before it touches a host and
// refuses what the OS cannot do, rather than writing somewhere that will not survive a reboot.
// Each provider also reads the facts the agent reports of the live host (facts.go).
package hostos

import (
	"fmt"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Provider is one host operating system: its static capabilities, and how its live facts are
// read.
type Provider interface {
	// Name is the OS's name for people, e.g. "Kairos".
	Name() string
	// Kind is the OS's name in an EdgeProfile's spec.os.
	Kind() nwv1.HostOSKind
	// SupportsShellHostOps: the agent may run commands and write files on the host. Without
	// it no capability below is supported.
	SupportsShellHostOps() bool
	// ImmutableRoot: the root file system is read-only or rebuilt from an image, so a change
	// outside PersistentConfigPath is gone after a reboot or an upgrade.
	ImmutableRoot() bool
	// PersistentConfigPath is the directory whose files configure the host and survive
	// reboots and upgrades; "" when there is none the agent can write.
	PersistentConfigPath() string

	// BootRecovery is how a hook runs on every boot, before the node rejoins storage
	// (reassembling a bond, bringing DRBD resources back).
	BootRecovery() Capability
	// PersistentNetworkConfig is how bond, VLAN and address settings outlive a reboot.
	PersistentNetworkConfig() Capability
	// KernelTuning is how kernel parameters (sysctls) outlive a reboot.
	KernelTuning() Capability

	// Facts reads what the live host says of itself (os-release; on Kairos its image and boot
	// entry). What it could read is returned with the error that kept it from the rest.
	Facts(h Host) (nwv1.HostOSStatus, error)
}

// Capability is one host operation: whether the agent can perform it, and how it persists.
type Capability struct {
	// Supported: the agent can perform the operation on this OS.
	Supported bool
	// Mechanism is what applies the setting on the host.
	Mechanism Mechanism
	// Path is where the setting is kept: a directory on the host, or for
	// MechanismMachineConfig the key in the machine config. "" when there is no such place.
	Path string
	// CloudConfigStage, when set, is the cloud-config stage that applies the setting on every
	// boot: the agent writes a cloud-config file under Path and that stage does the rest.
	// "" when Path holds the setting itself.
	CloudConfigStage string
}

// Mechanism is what applies a setting on the host.
type Mechanism string

// The mechanisms.
const (
	// MechanismNone: nothing on the OS can apply the setting.
	MechanismNone Mechanism = ""
	// MechanismCommands: shell commands.
	MechanismCommands Mechanism = "commands"
	// MechanismSystemdUnit: a systemd unit, enabled to start on every boot.
	MechanismSystemdUnit Mechanism = "systemd unit"
	// MechanismSystemdNetworkd: systemd-networkd .netdev and .network files.
	MechanismSystemdNetworkd Mechanism = "systemd-networkd"
	// MechanismSysctl: kernel parameters set at boot, as systemd-sysctl or yip's sysctl does.
	MechanismSysctl Mechanism = "sysctl"
	// MechanismMachineConfig: Talos's machine config, changed only through the Talos API.
	MechanismMachineConfig Mechanism = "machine config"
)

// All is every operating system Nodewright knows, in the order of the HostOSKind enum.
func All() []Provider {
	return []Provider{Kairos{}, SystemdNetworkd{}, Talos{}}
}

// ForKind is the operating system an EdgeProfile names.
func ForKind(kind nwv1.HostOSKind) (Provider, error) {
	for _, p := range All() {
		if p.Kind() == kind {
			return p, nil
		}
	}
	return nil, fmt.Errorf("unknown host OS kind %q", kind)
}
