package drbd

import (
	"fmt"
	"regexp"
	"strings"
)

// Drbdadm is the program every command runs; the Runner finds it on PATH.
const Drbdadm = "drbdadm"

// The names a NodeOperation may carry, as the API's validation patterns admit them
// (api/v1alpha1/nodeoperation_types.go). They are checked again here, because a command line is
// the last place a name can go wrong.
var (
	resourceNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,47}$`)
	peerNamePattern     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

const maxPeerNameLength = 253

// ValidateResourceName refuses a resource name the API would not admit, and the names drbdadm
// reads as something other than one resource: "all" is every resource, and "minor-<n>" is the
// device with that minor number, whatever resource it belongs to.
func ValidateResourceName(name string) error {
	switch {
	case !resourceNamePattern.MatchString(name):
		return fmt.Errorf("resource %q: does not match %s", name, resourceNamePattern)
	case name == "all":
		return fmt.Errorf("resource %q: drbdadm reads it as every resource", name)
	case strings.HasPrefix(name, "minor-"):
		return fmt.Errorf("resource %q: drbdadm reads minor-<n> as a device by its minor number", name)
	}
	return nil
}

// ValidatePeerName refuses a peer that is not a DNS subdomain, as the API requires of a node
// name.
func ValidatePeerName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("peer: empty")
	case len(name) > maxPeerNameLength:
		return fmt.Errorf("peer %q: %d characters, more than %d", name, len(name), maxPeerNameLength)
	case !peerNamePattern.MatchString(name):
		return fmt.Errorf("peer %q: not a DNS subdomain (%s)", name, peerNamePattern)
	}
	return nil
}

// PauseSyncCommand is `drbdadm pause-sync <resource>:<peer>`: it sets the local pause flag on
// the resynchronisation of every volume of the resource towards that peer (DRBD 9 names a
// connection resource:peer, the peer being its host name in the resource file).
func PauseSyncCommand(resource, peer string) ([]string, error) {
	return connectionCommand("pause-sync", resource, peer)
}

// ResumeSyncCommand is `drbdadm resume-sync <resource>:<peer>`: it clears the local pause flag
// PauseSyncCommand set.
func ResumeSyncCommand(resource, peer string) ([]string, error) {
	return connectionCommand("resume-sync", resource, peer)
}

// AdjustCommand is `drbdadm adjust <resource>`: it makes the kernel's configuration of the
// resource match the resource file LINSTOR wrote.
func AdjustCommand(resource string) ([]string, error) {
	return resourceCommand("adjust", resource)
}

// VerifyCommand is `drbdadm verify <resource>`: it starts DRBD's online verification of every
// volume of the resource against every connected peer.
func VerifyCommand(resource string) ([]string, error) {
	return resourceCommand("verify", resource)
}

// Drbdsetup is the program that reads the kernel's state of the resources.
const Drbdsetup = "drbdsetup"

// StatusCommand is `drbdsetup status --json`: every resource's state, which ParseStatus reads.
// It changes nothing, but drbdsetup asks modprobe for the DRBD module when the kernel has none
// loaded: check /proc/drbd first rather than load a module to report on it.
func StatusCommand() []string { return []string{Drbdsetup, "status", "--json"} }

// ResourceStatusCommand is `drbdsetup status <resource> --json`: the kernel's state of one
// resource, which ParseStatus reads.
func ResourceStatusCommand(resource string) ([]string, error) {
	if err := ValidateResourceName(resource); err != nil {
		return nil, err
	}
	return []string{Drbdsetup, "status", resource, "--json"}, nil
}

func connectionCommand(subcommand, resource, peer string) ([]string, error) {
	if err := ValidateResourceName(resource); err != nil {
		return nil, err
	}
	if err := ValidatePeerName(peer); err != nil {
		return nil, err
	}
	return []string{Drbdadm, subcommand, resource + ":" + peer}, nil
}

func resourceCommand(subcommand, resource string) ([]string, error) {
	if err := ValidateResourceName(resource); err != nil {
		return nil, err
	}
	return []string{Drbdadm, subcommand, resource}, nil
}
