package hostos

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"unicode/utf8"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Facts are observations, not capabilities: the agent reads them from the live host on every
// report, where the capabilities above are constants of each OS.

// Host is where the agent reads its host's facts.
type Host struct {
	// Root is the host's root file system as the agent sees it: "/" on the host itself, the
	// folder its pod mounts the host's files under otherwise. Files are read inside it, its
	// symbolic links followed only as far as they stay inside it.
	Root string
	// Proc is the kernel's /proc. The kernel's command line is the same in every mount
	// namespace, so a pod reads the host's in its own /proc. "/proc" when empty.
	Proc string
}

// The files the facts come from, relative to Host.Root (and Host.Proc for cmdline).
const (
	// osReleasePath is read first; usrOSReleasePath only when it is missing, as os-release(5)
	// says. /etc/os-release is often a symbolic link to ../usr/lib/os-release.
	osReleasePath     = "etc/os-release"
	usrOSReleasePath  = "usr/lib/os-release"
	kairosReleasePath = "etc/kairos-release"
	// kairosSentinelDir holds the file immucore writes at boot to say which entry it booted.
	kairosSentinelDir = "run/cos"
	cmdlinePath       = "cmdline"
)

// errNotFound is a fact's file that is not on the host.
var errNotFound = fs.ErrNotExist

// readFile reads name inside root, at most limit bytes.
func readFile(root, name string, limit int64) ([]byte, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("opening the host root %s: %w", root, err)
	}
	defer func() { _ = r.Close() }()
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", name, limit)
	}
	return data, nil
}

// exists reports whether name is inside root; an error other than its absence is returned.
func exists(root, name string) (bool, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return false, fmt.Errorf("opening the host root %s: %w", root, err)
	}
	defer func() { _ = r.Close() }()
	_, err = r.Stat(name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// releaseFile reads and parses one os-release-format file inside root.
func releaseFile(root, name string) (map[string]string, error) {
	data, err := readFile(root, name, MaxReleaseFileBytes)
	if err != nil {
		return nil, err
	}
	vars, err := ParseOSRelease(data)
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", name, err)
	}
	return vars, nil
}

// OSRelease reads the host's os-release: /etc/os-release, or /usr/lib/os-release when the
// former is missing (or a link that leaves the root, as an absolute link does when the host is
// mounted in a folder).
func (h Host) OSRelease() (map[string]string, error) {
	vars, err := releaseFile(h.Root, osReleasePath)
	if err == nil {
		return vars, nil
	}
	var parseErr *ReleaseError
	if errors.As(err, &parseErr) {
		return nil, err
	}
	fallback, fallbackErr := releaseFile(h.Root, usrOSReleasePath)
	if fallbackErr == nil {
		return fallback, nil
	}
	if errors.Is(err, errNotFound) && errors.Is(fallbackErr, errNotFound) {
		return nil, fmt.Errorf("neither /%s nor /%s is on the host (root %s)", osReleasePath, usrOSReleasePath, h.Root)
	}
	return nil, fmt.Errorf("/%s: %w; /%s: %w", osReleasePath, err, usrOSReleasePath, fallbackErr)
}

// cmdline reads the kernel's command line.
func (h Host) cmdline() (string, error) {
	proc := h.proc()
	// The kernel bounds it to a page (COMMAND_LINE_SIZE is 2048 to 4096 bytes on Linux).
	data, err := readFile(proc, cmdlinePath, 64<<10)
	if err != nil {
		return "", fmt.Errorf("the kernel command line: %w", err)
	}
	return string(data), nil
}

// osFacts are the facts every OS has: what os-release says, cut to the API's bounds.
func osFacts(kind nwv1.HostOSKind, vars map[string]string) nwv1.HostOSStatus {
	return nwv1.HostOSStatus{
		Kind:       kind,
		Name:       clip(vars["NAME"], nwv1.MaxOSNameLength),
		Version:    clip(vars["VERSION_ID"], nwv1.MaxOSNameLength),
		PrettyName: clip(vars["PRETTY_NAME"], nwv1.MaxOSPrettyNameLength),
	}
}

// releaseFacts are the facts of an OS known only by its os-release (SystemdNetworkd, Talos),
// and its boot ID.
func releaseFacts(kind nwv1.HostOSKind, h Host) (nwv1.HostOSStatus, error) {
	bootID, bootErr := h.BootID()
	vars, err := h.OSRelease()
	if err != nil {
		return nwv1.HostOSStatus{Kind: kind, BootID: bootID}, errors.Join(err, bootErr)
	}
	facts := osFacts(kind, vars)
	facts.BootID = bootID
	return facts, bootErr
}

// Detect tells which OS the host runs from its files: Kairos when it has /etc/kairos-release
// or its os-release says ID=kairos or carries KAIROS_ variables (older Kairos), Talos when its
// os-release says ID=talos, and otherwise a general Linux (SystemdNetworkd).
func Detect(h Host) (Provider, error) {
	vars, err := h.OSRelease()
	if err != nil {
		return nil, fmt.Errorf("telling the host's OS: %w", err)
	}
	kairos, err := exists(h.Root, kairosReleasePath)
	if err != nil {
		return nil, fmt.Errorf("telling the host's OS: /%s: %w", kairosReleasePath, err)
	}
	switch {
	case kairos || vars["ID"] == "kairos" || vars["KAIROS_VERSION"] != "":
		return Kairos{}, nil
	case vars["ID"] == "talos":
		return Talos{}, nil
	}
	return SystemdNetworkd{}, nil
}

// clip cuts s to at most limit bytes, on a character boundary.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
