package profile

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// FieldError is one thing wrong with one field of a profile.
type FieldError struct {
	// Field is the field's path, such as spec.network.storageVLAN.
	Field string
	// Reason says what is wrong, such as "must be between 1 and 4094, got 5000".
	Reason string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Reason }

// FieldErrors are every problem found in a profile, in field order. Decode and Validate return
// them as their error; errors.As finds them.
type FieldErrors []FieldError

func (e FieldErrors) Error() string {
	msgs := make([]string, len(e))
	for i, fe := range e {
		msgs[i] = fe.Error()
	}
	return strings.Join(msgs, "; ")
}

// The CRD schema's patterns and limits (api/v1alpha1), repeated so a file is checked before it
// is signed, without an API server.
var (
	interfaceNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)
	namespacePattern     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	objectNamePattern    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	durationPattern      = regexp.MustCompile(`^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$`)

	topologies = []v1alpha1.Topology{
		v1alpha1.TopologySingleNode, v1alpha1.TopologyTwoNodeTiebreaker, v1alpha1.TopologyThreeNode,
	}
	backends = []v1alpha1.StorageBackendKind{
		v1alpha1.StorageLINSTOR, v1alpha1.StorageTopoLVM, v1alpha1.StorageLonghorn,
		v1alpha1.StorageCephRBD, v1alpha1.StorageGenericCSI,
	}
	hostOSes = []v1alpha1.HostOSKind{
		v1alpha1.HostOSKairos, v1alpha1.HostOSSystemdNetworkd, v1alpha1.HostOSTalos,
	}
	bondModes = []v1alpha1.BondMode{
		v1alpha1.BondModeBalanceRR, v1alpha1.BondModeActiveBackup, v1alpha1.BondModeBalanceXOR,
		v1alpha1.BondModeBroadcast, v1alpha1.BondMode8023AD, v1alpha1.BondModeBalanceTLB,
		v1alpha1.BondModeBalanceALB,
	}
)

const (
	maxVersionLength     = 64
	maxMemberInterfaces  = 8
	maxStorageClassName  = 253
	maxEventComponent    = 128
	maxNamespaceLength   = 63
	maxObjectNameLength  = 253
	maxSignatureBase64   = 1024
	minVLAN, maxVLAN     = 1, 4094
	minHeartbeatStale    = time.Second
	maxHeartbeatStale    = time.Hour
	minDRBDSyncTimeout   = time.Minute
	maxDRBDSyncTimeout   = 48 * time.Hour
	interfacePatternText = "1 to 15 letters, digits, '.', '_' or '-', starting with a letter or digit"
)

// Validate checks spec against the rules of the EdgeProfile CRD schema, after applying its
// defaults, and returns FieldErrors naming every field that breaks one. The version must also be
// a semantic version 2.0 (the CRD's pattern lets through a few strings that are not, such as an
// empty pre-release identifier), so that versions can always be compared.
func Validate(spec v1alpha1.EdgeProfileSpec) error {
	var errs FieldErrors
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	spec = WithDefaults(spec)

	switch {
	case spec.Version == "":
		add("spec.version", "required")
	case utf8.RuneCountInString(spec.Version) > maxVersionLength:
		add("spec.version", "must be at most %d characters", maxVersionLength)
	default:
		if _, err := parseVersion(spec.Version); err != nil {
			add("spec.version", "%v", err)
		}
	}
	checkEnum(add, "spec.topology", spec.Topology, topologies)
	checkEnum(add, "spec.storage.backend", spec.Storage.Backend, backends)
	if n := utf8.RuneCountInString(spec.Storage.StorageClassName); n > maxStorageClassName {
		add("spec.storage.storageClassName", "must be at most %d characters, got %d", maxStorageClassName, n)
	}
	checkEnum(add, "spec.os", spec.OS, hostOSes)

	network := spec.Network
	if network.BondInterface == "" {
		add("spec.network.bondInterface", "required")
	} else if !interfaceNamePattern.MatchString(network.BondInterface) {
		add("spec.network.bondInterface", "%q is not an interface name (%s)", network.BondInterface, interfacePatternText)
	}
	checkEnum(add, "spec.network.bondMode", network.BondMode, bondModes)
	if len(network.MemberInterfaces) > maxMemberInterfaces {
		add("spec.network.memberInterfaces", "must have at most %d items, got %d", maxMemberInterfaces, len(network.MemberInterfaces))
	}
	for i, name := range network.MemberInterfaces {
		field := fmt.Sprintf("spec.network.memberInterfaces[%d]", i)
		if !interfaceNamePattern.MatchString(name) {
			add(field, "%q is not an interface name (%s)", name, interfacePatternText)
		} else if j := slices.Index(network.MemberInterfaces[:i], name); j >= 0 {
			add(field, "duplicate of memberInterfaces[%d] %q (the list is a set)", j, name)
		}
	}
	if v := network.StorageVLAN; v != nil && (*v < minVLAN || *v > maxVLAN) {
		add("spec.network.storageVLAN", "must be between %d and %d, got %d", minVLAN, maxVLAN, *v)
	}

	if l := spec.Legacy; l != nil {
		checkReference(add, "spec.legacy.configMapRef", l.ConfigMapRef)
		checkReference(add, "spec.legacy.daemonSetRef", l.DaemonSetRef)
		switch n := utf8.RuneCountInString(l.EventComponent); {
		case n == 0:
			add("spec.legacy.eventComponent", "required")
		case n > maxEventComponent:
			add("spec.legacy.eventComponent", "must be at most %d characters, got %d", maxEventComponent, n)
		}
	}

	checkDuration(add, "spec.thresholds.heartbeatStaleAfter", spec.Thresholds.HeartbeatStaleAfter.Duration, minHeartbeatStale, maxHeartbeatStale)
	checkDuration(add, "spec.thresholds.drbdSyncTimeout", spec.Thresholds.DRBDSyncTimeout.Duration, minDRBDSyncTimeout, maxDRBDSyncTimeout)

	if len(errs) > 0 {
		return errs
	}
	return nil
}

// validateSignatureField checks the signature against the CRD's limit, which applies to its
// base64 form.
func validateSignatureField(sig []byte) error {
	if n := base64.StdEncoding.EncodedLen(len(sig)); n > maxSignatureBase64 {
		return FieldErrors{{Field: "signature", Reason: fmt.Sprintf("must be at most %d characters of base64, got %d", maxSignatureBase64, n)}}
	}
	return nil
}

type addFunc func(field, format string, args ...any)

func checkEnum[T ~string](add addFunc, field string, value T, allowed []T) {
	if value == "" {
		add(field, "required")
		return
	}
	if !slices.Contains(allowed, value) {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = string(a)
		}
		add(field, "%q is not one of %s", value, strings.Join(names, ", "))
	}
}

func checkReference(add addFunc, field string, ref v1alpha1.NamespacedObjectReference) {
	switch {
	case ref.Namespace == "":
		add(field+".namespace", "required")
	case len(ref.Namespace) > maxNamespaceLength:
		add(field+".namespace", "must be at most %d characters", maxNamespaceLength)
	case !namespacePattern.MatchString(ref.Namespace):
		add(field+".namespace", "%q is not a namespace name (lower-case letters, digits and '-')", ref.Namespace)
	}
	switch {
	case ref.Name == "":
		add(field+".name", "required")
	case len(ref.Name) > maxObjectNameLength:
		add(field+".name", "must be at most %d characters", maxObjectNameLength)
	case !objectNamePattern.MatchString(ref.Name):
		add(field+".name", "%q is not an object name (lower-case letters, digits, '-' and '.')", ref.Name)
	}
}

func checkDuration(add addFunc, field string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		add(field, "must be between %s and %s, got %s", shortDuration(lo), shortDuration(hi), d)
	}
}

// validateDurationValue checks a duration as written in a file against the CRD's pattern,
// which is stricter than time.ParseDuration (no sign, no bare "0", no leading "."), and that
// time.ParseDuration can read it (it cannot past about 2562047h). An explicit zero ("0s") is out
// of bounds for the CRD, but the typed spec cannot tell it from an absent field, which takes the
// default, so it is refused here; Validate checks the other bounds.
func validateDurationValue(field string, v any, lo, hi time.Duration) *FieldError {
	const want = "must be a duration such as 30s, 5m or 1h30m"
	text, ok := v.(string)
	if !ok {
		return &FieldError{Field: field, Reason: fmt.Sprintf("%s, got %s (leave the field out for the default)", want, describeValue(v))}
	}
	if !durationPattern.MatchString(text) {
		return &FieldError{Field: field, Reason: fmt.Sprintf("%s, got %q", want, text)}
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return &FieldError{Field: field, Reason: fmt.Sprintf("%q is too long a duration", text)}
	}
	if d == 0 {
		return &FieldError{Field: field, Reason: fmt.Sprintf("must be between %s and %s, got %s", shortDuration(lo), shortDuration(hi), d)}
	}
	return nil
}

// shortDuration writes 1h rather than 1h0m0s, as the CRD's messages do.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
