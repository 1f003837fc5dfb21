package hostos

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// SystemdNetworkd is a general, mutable Linux (e.g. Ubuntu) whose network is managed by
// systemd-networkd: configuration files in /etc persist, and systemd applies them at boot.
type SystemdNetworkd struct{}

func (SystemdNetworkd) Name() string          { return "Linux with systemd-networkd (e.g. Ubuntu)" }
func (SystemdNetworkd) Kind() nwv1.HostOSKind { return nwv1.HostOSSystemdNetworkd }

// SupportsShellHostOps is true: a general Linux host with a shell.
func (SystemdNetworkd) SupportsShellHostOps() bool { return true }

// ImmutableRoot is false: the root file system is writable and changes to it persist.
func (SystemdNetworkd) ImmutableRoot() bool { return false }

// PersistentConfigPath is /etc, where the host's own configuration lives.
func (SystemdNetworkd) PersistentConfigPath() string { return "/etc" }

// BootRecovery is a systemd unit in /etc/systemd/system, enabled so it runs on every boot.
func (SystemdNetworkd) BootRecovery() Capability {
	return Capability{Supported: true, Mechanism: MechanismSystemdUnit, Path: "/etc/systemd/system"}
}

// PersistentNetworkConfig is .netdev and .network files in /etc/systemd/network. networkd
// sorts them by name together with netplan's in /run/systemd/network, and the first .network
// file matching a link wins.
func (SystemdNetworkd) PersistentNetworkConfig() Capability {
	return Capability{Supported: true, Mechanism: MechanismSystemdNetworkd, Path: "/etc/systemd/network"}
}

// KernelTuning is a drop-in in /etc/sysctl.d, which systemd-sysctl applies early in every boot.
func (SystemdNetworkd) KernelTuning() Capability {
	return Capability{Supported: true, Mechanism: MechanismSysctl, Path: "/etc/sysctl.d"}
}

// Facts are what its os-release says.
func (SystemdNetworkd) Facts(h Host) (nwv1.HostOSStatus, error) {
	return releaseFacts(nwv1.HostOSSystemdNetworkd, h)
}
