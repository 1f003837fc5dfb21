package systemdunit

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, name := range []string{"k3s.service", "multi-user.target", "-.mount", `mnt-data\x2d1.mount`, "getty@tty1.service",
		"systemd-fsck@dev-disk-by\\x2duuid-1234.service", "var-lib-rancher.mount", "logrotate.timer", "sshd.socket", strings.Repeat("a", 247) + ".service"} {
		if err := ValidName(name); err != nil {
			t.Errorf("ValidName(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "k3s", "k3s.unknown", "--all", "-H", "k3s service", "k3s.service;reboot", "*.service", "k3s?.service",
		"a@b@c.service", "@.service", "getty@.service", "123", "k3s.service\n", "k3s.service ", "kö.service", strings.Repeat("a", 248) + ".service"} {
		if err := ValidName(name); err == nil {
			t.Errorf("ValidName(%q) accepted it", name)
		}
	}
}

func TestParseShow(t *testing.T) {
	sample, err := os.ReadFile("testdata/show-k3s-failed-notfound.txt")
	if err != nil {
		t.Fatal(err)
	}
	three := []string{"k3s.service", "nodewright-demo.service", "absent.service"}
	for _, tc := range []struct {
		name  string
		out   string
		names []string
		want  []State
		err   string
	}{
		{name: "the sample", out: string(sample), names: three, want: []State{
			{Name: "k3s.service", ID: "k3s.service", LoadState: "loaded", ActiveState: "active", SubState: "running"},
			{Name: "nodewright-demo.service", ID: "nodewright-demo.service", LoadState: "loaded", ActiveState: "failed", SubState: "failed"},
			{Name: "absent.service", ID: "absent.service", LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}}},
		{name: "an alias shows its unit, matched by order", out: "Id=systemd-networkd.service\nLoadState=loaded\nActiveState=active\nSubState=running\n",
			names: []string{"dbus-org.freedesktop.network1.service"},
			want:  []State{{Name: "dbus-org.freedesktop.network1.service", ID: "systemd-networkd.service", LoadState: "loaded", ActiveState: "active", SubState: "running"}}},
		{name: "properties in any order, a value with =", out: "SubState=exited\nActiveState=active\nLoadState=loaded\nId=a=b.service\n",
			names: []string{"x.service"}, want: []State{{Name: "x.service", ID: "a=b.service", LoadState: "loaded", ActiveState: "active", SubState: "exited"}}},
		{name: "no output at all", out: "", names: []string{"k3s.service"}, err: "properties of 0 units for the 1 named"},
		{name: "fewer blocks than names", out: "Id=k3s.service\nLoadState=loaded\nActiveState=active\nSubState=running\n", names: three, err: "properties of 1 units for the 3 named"},
		{name: "blocks run together", out: strings.ReplaceAll(string(sample), "\n\n", "\n"), names: three, err: "repeats Id"},
		{name: "a line that is not a property", out: "Running in chroot, ignoring command 'show'\n", names: []string{"k3s.service"}, err: "is not KEY=VALUE"},
		{name: "a key missing", out: "=x\n", names: []string{"k3s.service"}, err: "is not KEY=VALUE"},
		{name: "no ActiveState", out: "Id=k3s.service\nLoadState=loaded\n", names: []string{"k3s.service"}, err: "no LoadState or ActiveState"},
		{name: "too much", out: strings.Repeat("Id=x\n\n", 20000), names: []string{"k3s.service"}, err: "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseShow([]byte(tc.out), tc.names)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseShow: %v, %+v; want an error saying %q", err, got, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseShow: %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestShowArgs(t *testing.T) {
	got := ShowArgs([]string{"k3s.service", "-.mount"})
	want := []string{"show", "--property=Id,LoadState,ActiveState,SubState", "--no-pager", "--", "k3s.service", "-.mount"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ShowArgs: %q; want %q", got, want)
	}
}

// FuzzParseShow: any output is parsed without a panic, and a parse that succeeds gives one
// state for each name, with a LoadState and an ActiveState.
func FuzzParseShow(f *testing.F) {
	sample, err := os.ReadFile("testdata/show-k3s-failed-notfound.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample, 3)
	f.Add([]byte("Id=k3s.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"), 1)
	f.Add([]byte("Id=a\r\nLoadState=x\r\nActiveState=y\r\n\r\n\r\nId=b\nLoadState=x\nActiveState=y\n"), 2)
	f.Add([]byte("Running in chroot, ignoring command 'show'\n"), 1)
	f.Add([]byte("\n\n=\n==\nA=\n"), 0)
	f.Fuzz(func(t *testing.T, out []byte, n int) {
		if n < 0 || n > 16 {
			return
		}
		names := make([]string, n)
		for i := range names {
			names[i] = "u.service"
		}
		states, err := ParseShow(out, names)
		if err != nil {
			return
		}
		if len(states) != n {
			t.Fatalf("%d states for %d names", len(states), n)
		}
		for _, s := range states {
			if s.LoadState == "" || s.ActiveState == "" || s.Name != "u.service" {
				t.Fatalf("state %+v", s)
			}
		}
	})
}

// FuzzValidName: a name ValidName accepts is never a pattern systemctl would expand, holds no
// space, control character or "=", and is within systemd's length (one that starts with "-" is
// kept from being an option by the "--" before the names).
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"k3s.service", "-.mount", "--all", "*.service", `a\x2db.mount`, "getty@tty1.service"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidName(name) != nil {
			return
		}
		if len(name) > MaxName || strings.ContainsAny(name, "*?[] \t\n\x00=") {
			t.Fatalf("ValidName accepted %q", name)
		}
	})
}
