package hostos

import (
	"errors"
	"io/fs"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

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

// Facts are what os-release says, the image /etc/kairos-release describes (older Kairos put
// its KAIROS_ variables in os-release, read when there is no kairos-release), the boot entry
// in use (kairosboot.go), and the boot ID, the image booted, the upgrade failure and the boot
// assessment (kairosupgrade.go), and on a UKI node the boot counter (kairosbootcount.go).
func (Kairos) Facts(h Host) (nwv1.HostOSStatus, error) {
	var errs []error
	facts := nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, Kairos: &nwv1.KairosStatus{}}
	osRelease, err := h.OSRelease()
	if err != nil {
		errs = append(errs, err)
	} else {
		facts = osFacts(nwv1.HostOSKairos, osRelease)
		facts.Kairos = &nwv1.KairosStatus{}
	}
	release, err := releaseFile(h.Root, kairosReleasePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		release = osRelease
	case err != nil:
		errs = append(errs, err)
	}
	k := facts.Kairos
	k.Version = clip(release["KAIROS_VERSION"], nwv1.MaxOSNameLength)
	k.Flavor = clip(release["KAIROS_FLAVOR"], nwv1.MaxOSNameLength)
	k.FlavorRelease = clip(release["KAIROS_FLAVOR_RELEASE"], nwv1.MaxOSNameLength)
	k.Variant = clip(release["KAIROS_VARIANT"], nwv1.MaxOSNameLength)
	k.Model = clip(release["KAIROS_MODEL"], nwv1.MaxOSNameLength)
	k.SoftwareVersion = clip(release["KAIROS_SOFTWARE_VERSION"], nwv1.MaxOSNameLength)
	boot, err := h.ReadKairosBoot()
	if err != nil {
		errs = append(errs, err)
	}
	facts.BootID = boot.BootID
	k.BootEntry, k.Image, k.UpgradeFailure, k.BootAssessment = boot.Entry, boot.Image, boot.UpgradeFailure, boot.AssessmentStatus()
	if k.BootCounting, err = h.KairosBootCounting(); err != nil {
		errs = append(errs, err)
	}
	return facts, errors.Join(errs...)
}
