package hostos

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// Talos is Talos Linux: no shell, no SSH, and a read-only root; the host is configured only by
// its machine config, through the Talos API. Nodewright performs no host operations on it.
type Talos struct{}

func (Talos) Name() string          { return "Talos Linux" }
func (Talos) Kind() nwv1.HostOSKind { return nwv1.HostOSTalos }

// SupportsShellHostOps is false: Talos has no shell or SSH; apid is the only way in.
func (Talos) SupportsShellHostOps() bool { return false }

// ImmutableRoot is true: the root is a read-only SquashFS image.
func (Talos) ImmutableRoot() bool { return true }

// PersistentConfigPath is "": the machine config is the only persistent configuration, and it
// is not a directory the agent writes.
func (Talos) PersistentConfigPath() string { return "" }

// BootRecovery is unsupported: Talos runs no user hooks at boot; only system extensions
// built into the image run services.
func (Talos) BootRecovery() Capability { return Capability{} }

// PersistentNetworkConfig is unsupported: bonds, VLANs and addresses are machine.network in the
// machine config.
func (Talos) PersistentNetworkConfig() Capability {
	return Capability{Mechanism: MechanismMachineConfig, Path: "machine.network"}
}

// KernelTuning is unsupported: kernel parameters are machine.sysctls in the machine config.
func (Talos) KernelTuning() Capability {
	return Capability{Mechanism: MechanismMachineConfig, Path: "machine.sysctls"}
}

// Facts are what its os-release says.
func (Talos) Facts(h Host) (nwv1.HostOSStatus, error) { return releaseFacts(nwv1.HostOSTalos, h) }
