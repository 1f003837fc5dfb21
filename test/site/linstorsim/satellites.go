package linstorsim

import (
	"context"
	"slices"
	"strings"
	"time"
)

// FollowResources plays what LINSTOR's satellites do with the resources the stand-in holds:
// until ctx ends, it looks every interval, and for each resource definition whose nodes
// changed (a resource placed, or gone or being deleted) calls place with the nodes that now
// hold it with a disk and without (none: it is gone everywhere), as a satellite writes or
// deletes the resource's file on its node. A test hands it the played DRBD's
// (netsite.Network.PlaceDRBDDiskless). A failed place is tried again at the next look.
func (s *Server) FollowResources(ctx context.Context, interval time.Duration, place func(definition string, diskful, diskless []string) error) {
	written := map[string]string{}
	for {
		st := s.State()
		type holders struct{ diskful, diskless []string }
		held := map[string]*holders{}
		for def := range st.Definitions {
			held[def] = &holders{}
		}
		for key, r := range st.Resources {
			def, node, _ := strings.Cut(key, "/")
			h := held[def]
			switch {
			case h == nil || r.Deleting:
			case r.Diskless:
				h.diskless = append(h.diskless, node)
			default:
				h.diskful = append(h.diskful, node)
			}
		}
		for def, h := range held {
			slices.Sort(h.diskful)
			slices.Sort(h.diskless)
			key := strings.Join(h.diskful, ",") + "|" + strings.Join(h.diskless, ",")
			if was, ok := written[def]; ok && was == key {
				continue
			}
			if err := place(def, h.diskful, h.diskless); err == nil {
				written[def] = key
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
