package profile

import (
	"errors"
	"strings"
	"testing"
)

func TestCompareVersions(t *testing.T) {
	// Each list is in ascending order; the first is semver.org's own example (section 11).
	for _, ascending := range [][]string{
		{"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"},
		{"0.0.0", "0.0.1", "0.1.0", "0.9.0", "0.10.0", "1.0.0", "1.9.9", "1.10.0", "2.0.0", "10.0.0"},
		{"1.0.0-1", "1.0.0-2", "1.0.0-10", "1.0.0-a", "1.0.0-a-b", "1.0.0-b"},
		{"1.0.0-a", "1.0.0-a.0", "1.0.0-a.0.0"},
		{"99999999999999999999.0.0", "100000000000000000000.0.0"},
	} {
		for i := range ascending {
			for j := range ascending {
				want := 0
				if i < j {
					want = -1
				} else if i > j {
					want = 1
				}
				got, err := CompareVersions(ascending[i], ascending[j])
				if err != nil || got != want {
					t.Errorf("CompareVersions(%s, %s) = %d, %v; want %d", ascending[i], ascending[j], got, err, want)
				}
			}
		}
	}
}

func TestCompareVersionsEqual(t *testing.T) {
	for _, pair := range [][2]string{
		{"v1.2.0", "1.2.0"},
		{"v1.2.0-rc.1", "1.2.0-rc.1"},
	} {
		if got, err := CompareVersions(pair[0], pair[1]); err != nil || got != 0 {
			t.Errorf("CompareVersions(%s, %s) = %d, %v; want 0", pair[0], pair[1], got, err)
		}
	}
}

func TestCompareVersionsRefuses(t *testing.T) {
	for _, v := range []string{
		"", "1", "1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.03", "V1.2.3", "vv1.2.3", "1.2.3-", "1.2.3-a..b",
		"1.2.3-01", "1.2.3+build", "1.2.3-a+b", "1.2.3-a_b", "-1.2.3", "1.2.x", " 1.2.3", "1.2.3 ",
	} {
		if _, err := CompareVersions(v, "1.0.0"); err == nil {
			t.Errorf("CompareVersions(%q, 1.0.0) accepted it", v)
		}
		if _, err := CompareVersions("1.0.0", v); err == nil {
			t.Errorf("CompareVersions(1.0.0, %q) accepted it", v)
		}
	}
}

func TestCheckUpgrade(t *testing.T) {
	for _, tc := range []struct {
		active, proposed string
		want             string // "" for allowed
	}{
		{"1.3.0", "1.4.0", ""},
		{"1.3.0", "1.3.0", ""},
		{"", "0.1.0", ""},
		{"1.3.0-rc.1", "1.3.0", ""},
		{"v1.3.0", "1.3.0", ""},
		{"1.3.0", "1.2.0", "spec.version: 1.2.0 is lower than the active 1.3.0; a profile cannot be downgraded"},
		{"1.3.0", "1.3.0-rc.1", "spec.version: 1.3.0-rc.1 is lower than the active 1.3.0; a profile cannot be downgraded"},
		{"1.10.0", "1.9.0", "spec.version: 1.9.0 is lower than the active 1.10.0"},
		{"1.3.0", "1.3", `spec.version: "1.3" is not a semantic version`},
		{"junk", "1.3.0", `active version: "junk" is not a semantic version`},
	} {
		err := CheckUpgrade(tc.active, tc.proposed)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckUpgrade(%s, %s): %v", tc.active, tc.proposed, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckUpgrade(%s, %s) = %v, want %s", tc.active, tc.proposed, err, tc.want)
		}
	}
	if err := CheckUpgrade("2.0.0", "1.0.0"); !errors.Is(err, ErrDowngrade) {
		t.Errorf("a downgrade is %v, want ErrDowngrade", err)
	}
}
