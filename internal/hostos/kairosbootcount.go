package hostos

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// A UKI (trusted boot) Kairos node boots with systemd-boot, whose Automatic Boot Assessment
// counts the tries of an entry in the name of its file: NAME+LEFT-DONE.conf (the Boot Loader
// Specification's boot counting; Kairos's entries are loader/entries/active.conf and the
// others, "active+3.conf" with the assessment, kairos-io/kairos-agent pkg/action/bootentries.go
// findEntryWithAssessment, commit 96f93a04a554e30ad034ec9ee8bbf7b9ac242c5d). The rules are
// systemd's own (systemd/systemd src/boot/boot.c):
//
//   - boot_entry_parse_tries reads the counter after the name's last '+': LEFT, a decimal
//     number of at most INT_MAX, then optionally '-' and DONE (absent: 0), then the suffix
//     (".conf" for a type-1 entry, ".efi" for a type-2 UKI in EFI/Linux) and nothing else. A
//     name without a '+', or whose counter does not read so, has no counter.
//   - boot_entry_bump_counters, as it boots an entry with a counter, renames its file to
//     NAME+(LEFT-1)-(DONE+1) (LEFT stays 0 at 0) and sets the EFI variable LoaderBootCountPath
//     of the loader's vendor GUID 4a67b082-0a4c-41cf-b6c7-440b29bb8c4f to the new path,
//     "\loader\entries\NAME+LEFT-DONE.conf" (efivar_set, flags 0: a volatile variable, gone at
//     the next boot). systemd-bless-boot reads it to rename the file to NAME.conf once the
//     boot counts as good (src/bless-boot/bless-boot.c), and its generator runs only when the
//     variable is set (src/boot/bless-boot-generator.c): without it, the boot has no counter.
//   - Linux's efivarfs shows the variable as a file named NAME-GUID under
//     /sys/firmware/efi/efivars: its first 4 bytes are the variable's attributes (a
//     little-endian uint32), the rest its value (Documentation/filesystems/efivarfs.rst);
//     systemd's strings are UTF-16LE ending in a NUL (efivar_set writes strsize16, the NUL
//     included).

// KairosOEMEnvFile is the GRUB environment block kairos-agent's bootentry --select writes
// next_entry into on a GRUB node (selectBootEntryGrub, "/oem/grubenv": the grubenv file,
// constants.GrubEnv, of the OEM partition, kairos-io/kairos-agent pkg/action/bootentries.go at
// commit 96f93a04a554e30ad034ec9ee8bbf7b9ac242c5d), as a path on the host.
const KairosOEMEnvFile = "/oem/grubenv"

// LoaderVendorGUID is the vendor GUID of systemd-boot's EFI variables (the Boot Loader
// Interface).
const LoaderVendorGUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"

// LoaderBootCountPathFile is the efivarfs file of LoaderBootCountPath, relative to Host.Root.
const LoaderBootCountPathFile = "sys/firmware/efi/efivars/LoaderBootCountPath-" + LoaderVendorGUID

// maxEFIVarBytes bounds an EFI variable read: a path of at most 1024 UTF-16 units and its
// attributes (systemd's entry paths are far shorter).
const maxEFIVarBytes = 4 + 2*1025

// ParseEFIVarString reads an efivarfs file that holds a string, as systemd writes one: 4 bytes
// of attributes, then UTF-16LE ending in a NUL. A file shorter than its attributes, of an odd
// length, without the NUL, with a NUL inside, or not valid UTF-16 is refused, saying why.
func ParseEFIVarString(data []byte) (string, error) {
	switch {
	case len(data) > maxEFIVarBytes:
		return "", fmt.Errorf("%d bytes, more than the %d a boot entry's path may take", len(data), maxEFIVarBytes)
	case len(data) < 4:
		return "", fmt.Errorf("%d bytes, fewer than the variable's 4 bytes of attributes", len(data))
	case len(data)%2 != 0:
		return "", fmt.Errorf("the value is %d bytes, not UTF-16 (an odd length)", len(data)-4)
	}
	units := make([]uint16, 0, (len(data)-4)/2)
	for i := 4; i < len(data); i += 2 {
		units = append(units, uint16(data[i])|uint16(data[i+1])<<8)
	}
	if len(units) == 0 || units[len(units)-1] != 0 {
		return "", errors.New("the value does not end with a UTF-16 NUL")
	}
	units = units[:len(units)-1]
	for i, u := range units {
		if u == 0 {
			return "", fmt.Errorf("the value has a NUL at UTF-16 unit %d, before its end", i)
		}
	}
	s := string(utf16.Decode(units))
	if strings.ContainsRune(s, utf8.RuneError) {
		return "", errors.New("the value is not valid UTF-16 (a lone surrogate)")
	}
	return s, nil
}

// ParseBootCounter reads the boot counter of a boot entry's path (LoaderBootCountPath), by
// systemd-boot's rules (above): ok is false when its name has none. The name is the path's
// part after its last backslash.
func ParseBootCounter(path string) (left, done int32, ok bool) {
	name := path
	if i := strings.LastIndexByte(path, '\\'); i >= 0 {
		name = path[i+1:]
	}
	plus := strings.LastIndexByte(name, '+')
	if plus < 0 {
		return 0, 0, false
	}
	rest := name[plus+1:]
	l, rest, ok := parseCounterNumber(rest)
	if !ok {
		return 0, 0, false
	}
	var d int32
	if strings.HasPrefix(rest, "-") {
		if d, rest, ok = parseCounterNumber(rest[1:]); !ok {
			return 0, 0, false
		}
	}
	if rest != ".conf" && rest != ".efi" {
		return 0, 0, false
	}
	return l, d, true
}

// parseCounterNumber reads the decimal number s starts with (at least one digit, at most
// INT_MAX) and what follows it.
func parseCounterNumber(s string) (int32, string, bool) {
	var n int64
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
		if n > math.MaxInt32 {
			return 0, s, false
		}
	}
	if i == 0 {
		return 0, s, false
	}
	return int32(n), s[i:], true
}

// KairosBootCounting reads the boot counter of the entry a UKI node booted: nil when the host
// has no LoaderBootCountPath (a GRUB node, no EFI, an entry without a counter).
func (h Host) KairosBootCounting() (*nwv1.KairosBootCounting, error) {
	data, err := readFile(h.Root, LoaderBootCountPathFile, maxEFIVarBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("the boot counter: %w", err)
	}
	path, err := ParseEFIVarString(data)
	if err != nil {
		return nil, fmt.Errorf("the boot counter: /%s: %w", LoaderBootCountPathFile, err)
	}
	left, done, ok := ParseBootCounter(path)
	if !ok {
		return nil, nil
	}
	return &nwv1.KairosBootCounting{TriesLeft: left, TriesDone: done}, nil
}

// kairosUKIParam is on the kernel command line of a UKI Kairos boot (kairos-agent's
// utils.IsUki reads it, pkg/utils/common.go).
const kairosUKIParam = "rd.immucore.uki"

// KairosUKI reports whether the host booted a UKI (systemd-boot) Kairos system, as kairos-agent
// tells it: rd.immucore.uki on the kernel's command line.
func (h Host) KairosUKI() (bool, error) {
	cmdline, err := h.cmdline()
	if err != nil {
		return false, err
	}
	for _, p := range strings.Fields(cmdline) {
		if p == "--" {
			break
		}
		if p == kairosUKIParam {
			return true, nil
		}
	}
	return false, nil
}
