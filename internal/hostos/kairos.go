package hostos

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// Kairos is an immutable image-based Linux. Only cloud-config files persist: those in /oem are
// read on every boot, and their stages (initramfs, boot, network...) apply them again.
type Kairos struct{}

func (Kairos) Name() string          { return "Kairos" }
func (Kairos) Kind() nwv1.HostOSKind { return nwv1.HostOSKairos }

// SupportsShellHostOps is true: Kairos is a full Linux userland with a shell, only its root
// is read-only.
func (Kairos) SupportsShellHostOps() bool { return true }

// ImmutableRoot is true: immucore mounts the image read-only, with ephemeral overlays on /etc
// and the other writable paths.
func (Kairos) ImmutableRoot() bool { return true }

// PersistentConfigPath is /oem, the OEM partition whose cloud-config files Kairos runs on every
// boot and keeps across upgrades.
func (Kairos) PersistentConfigPath() string { return "/oem" }

// BootRecovery runs commands from the boot stage of a cloud-config file in /oem.
func (Kairos) BootRecovery() Capability {
	return Capability{Supported: true, Mechanism: MechanismCommands, Path: "/oem", CloudConfigStage: "boot"}
}

// PersistentNetworkConfig is systemd-networkd files that the initramfs stage of a cloud-config
// file in /oem writes to /etc/systemd/network, before networkd starts, on every boot.
func (Kairos) PersistentNetworkConfig() Capability {
	return Capability{Supported: true, Mechanism: MechanismSystemdNetworkd, Path: "/oem", CloudConfigStage: "initramfs"}
}

// KernelTuning is the sysctl step of the boot stage of a cloud-config file in /oem.
func (Kairos) KernelTuning() Capability {
	return Capability{Supported: true, Mechanism: MechanismSysctl, Path: "/oem", CloudConfigStage: "boot"}
}
