package profile

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
)

// ErrDowngrade is returned by CheckUpgrade for a version lower than the active one.
var ErrDowngrade = errors.New("a profile cannot be downgraded")

// version is a parsed semantic version. The numbers stay decimal strings (without leading
// zeros), so no version is too large to compare.
type version struct {
	major, minor, patch string
	pre                 []string
}

// parseVersion reads a semantic version 2.0 with an optional leading "v" and no build metadata,
// as the CRD's pattern does, but also refuses what the pattern lets through and semantic
// versioning forbids: empty pre-release identifiers and numeric ones with leading zeros.
func parseVersion(s string) (version, error) {
	rest := strings.TrimPrefix(s, "v")
	if strings.Contains(rest, "+") {
		return version{}, fmt.Errorf("%q has build metadata (+...), which a profile version may not have", s)
	}
	core, pre, hasPre := strings.Cut(rest, "-")
	nums := strings.Split(core, ".")
	if len(nums) != 3 {
		return version{}, fmt.Errorf("%q is not a semantic version MAJOR.MINOR.PATCH, such as 1.4.0", s)
	}
	for _, n := range nums {
		if !isNumeric(n) {
			return version{}, fmt.Errorf("%q is not a semantic version: %q is not a number without leading zeros", s, n)
		}
	}
	v := version{major: nums[0], minor: nums[1], patch: nums[2]}
	if hasPre {
		v.pre = strings.Split(pre, ".")
		for _, id := range v.pre {
			switch {
			case id == "":
				return version{}, fmt.Errorf("%q is not a semantic version: empty pre-release identifier", s)
			case strings.Trim(id, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-") != "":
				return version{}, fmt.Errorf("%q is not a semantic version: pre-release identifier %q has characters other than letters, digits and '-'", s, id)
			case isDigits(id) && !isNumeric(id):
				return version{}, fmt.Errorf("%q is not a semantic version: numeric pre-release identifier %q has a leading zero", s, id)
			}
		}
	}
	return v, nil
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// isNumeric says whether s is a number as semantic versioning writes one: digits, and no
// leading zero unless it is 0.
func isNumeric(s string) bool {
	return isDigits(s) && (s == "0" || s[0] != '0')
}

func compareNumeric(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}

// CompareVersions compares two semantic versions by semantic versioning 2.0 precedence,
// returning -1, 0 or 1. A leading "v" is ignored ("v1.2.0" equals "1.2.0"); a pre-release is
// lower than its release (1.0.0-rc.1 < 1.0.0), and pre-releases compare identifier by identifier,
// numerically for numbers, which are lower than alphanumeric identifiers.
func CompareVersions(a, b string) (int, error) {
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	if c := cmp.Or(
		compareNumeric(va.major, vb.major),
		compareNumeric(va.minor, vb.minor),
		compareNumeric(va.patch, vb.patch),
	); c != 0 {
		return c, nil
	}
	switch {
	case len(va.pre) == 0 && len(vb.pre) == 0:
		return 0, nil
	case len(va.pre) == 0:
		return 1, nil
	case len(vb.pre) == 0:
		return -1, nil
	}
	for i := 0; i < len(va.pre) && i < len(vb.pre); i++ {
		if c := comparePreRelease(va.pre[i], vb.pre[i]); c != 0 {
			return c, nil
		}
	}
	return cmp.Compare(len(va.pre), len(vb.pre)), nil
}

func comparePreRelease(a, b string) int {
	an, bn := isDigits(a), isDigits(b)
	switch {
	case an && bn:
		return compareNumeric(a, b)
	case an:
		return -1
	case bn:
		return 1
	}
	return strings.Compare(a, b)
}

// CheckUpgrade refuses replacing the active profile version by a lower one. An empty active
// version means no profile is active yet; an equal version is allowed (whether the spec may
// change without a new version is the CRD's rule, not this one).
func CheckUpgrade(active, proposed string) error {
	if active == "" {
		return nil
	}
	c, err := CompareVersions(proposed, active)
	if err != nil {
		if _, activeErr := parseVersion(active); activeErr != nil {
			return fmt.Errorf("active version: %w", activeErr)
		}
		return fmt.Errorf("spec.version: %w", err)
	}
	if c < 0 {
		return fmt.Errorf("spec.version: %s is lower than the active %s; %w", proposed, active, ErrDowngrade)
	}
	return nil
}
