package cli

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// shortDuration writes d the way kubectl writes ages, to the precision a person reads:
// 45s, 3m05s, 2h10m, 3d4h. Negative durations (a clock behind the server's) are 0s.
func shortDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch s := int64(d.Round(time.Second) / time.Second); {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 48*3600:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
	}
}

// age is how long ago t was, or "-" when it is unset.
func age(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return shortDuration(now.Sub(t.Time))
}

// timestamp writes t in UTC as RFC 3339, or "-" when it is unset.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// bytesIEC writes n bytes in binary units with one decimal: 512 B, 1.5 KiB, 4.0 GiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// kib writes a size given in KiB.
func kib(n int64) string {
	if n == 0 {
		return "0"
	}
	return bytesIEC(n * 1024)
}

// printLines writes lines to the command's output, one a line.
func printLines(f *Factory, lines []string) error {
	for _, l := range lines {
		if _, err := fmt.Fprintln(f.Streams().Out, l); err != nil {
			return err
		}
	}
	return nil
}
