// Package benchproc runs a program under measurement as its own process, so that its CPU time
// and RSS are its own, and reads them from /proc.
package benchproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a program under measurement.
type Process struct {
	Cmd *exec.Cmd
	log *os.File
}

// Start runs cmd with its output in logPath; it is killed if the benchmark dies.
func Start(cmd *exec.Cmd, logPath string) (*Process, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	// A benchmark killed outright takes what it measures with it, rather than leaving an
	// operator and an observer running against an API server that is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	return &Process{Cmd: cmd, log: log}, nil
}

// FreePort is a TCP port free on 127.0.0.1 a moment ago.
func FreePort() (string, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return ports[0], nil
}

// FreePorts are n distinct TCP ports free on 127.0.0.1 a moment ago: each is held until all
// are found, so that two calls of FreePort cannot hand out one port twice.
func FreePorts(n int) ([]string, error) {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// Stop stops the process (SIGTERM, then SIGKILL after 20s) and waits for it.
func (p *Process) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.Cmd.Process.Kill()
	}
	_ = p.log.Close()
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat (100 on Linux).
const clockTicks = 100

// CPUTime is the user and system CPU time the process has used.
func (p *Process) CPUTime() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat: %q", data)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc stat: %q", data)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// PeakRSS is the process's high-water resident set size in bytes.
func (p *Process) PeakRSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", p.Cmd.Process.Pid)
}

// RSSParts is the process's resident set now, split into anonymous memory (heap, stacks)
// and file-backed pages (mostly the binary's own), in bytes.
func (p *Process) RSSParts() (anon, file int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "RssAnon" && key != "RssFile") {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", p.Cmd.Process.Pid, key, err)
		}
		if key == "RssAnon" {
			anon = kib << 10
		} else {
			file = kib << 10
		}
	}
	return anon, file, nil
}

// Build builds the command pkg of the module at root into out as an image builds it: static
// and stripped. The binary's pages the process touches count in its RSS, so a cgo build with
// symbols would measure a larger process than the one deployed. tags are build tags.
func Build(root, pkg, out string, tags ...string) error {
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-tags="+strings.Join(tags, ","), "-o", out, pkg)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if output, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, output)
	}
	return nil
}

// Missed is set when a figure missed its target; the benchmark then exits 1 after printing.
var Missed bool

// Verdict prints whether a figure met its target, and remembers a miss in Missed.
func Verdict(target string, ok bool) {
	word := "PASS"
	if !ok {
		word, Missed = "FAIL", true
	}
	fmt.Printf("  %s  %s\n", word, target)
}

// MiB is n bytes in MiB.
func MiB(n int64) float64 { return float64(n) / (1 << 20) }

// Percent is cpu time as a percentage of one core over wall.
func Percent(cpu, wall time.Duration) float64 { return 100 * float64(cpu) / float64(wall) }

// SelfCPUTime is the CPU time, user and system, this process has used: the benchmark's own,
// with whatever it serves in process.
func SelfCPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// MachineCPUTime is the CPU time every core of the machine spent busy (user, nice, system,
// interrupts, softirq and steal: all but idle and waiting on I/O), from /proc/stat.
func MachineCPUTime() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("unexpected /proc/stat: %q", line)
	}
	var busy int64
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc/stat: %q", line)
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}
