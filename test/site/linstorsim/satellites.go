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
// hold it (none: it is gone everywhere), as a satellite writes or deletes the resource's file
// on its node. A test hands it the played DRBD's (netsite.Network.PlaceDRBD). A failed place
// is tried again at the next look.
func (s *Server) FollowResources(ctx context.Context, interval time.Duration, place func(definition string, nodes []string) error) {
	written := map[string]string{}
	for {
		st := s.State()
		holders := map[string][]string{}
		for def := range st.Definitions {
			holders[def] = nil
		}
		for key, r := range st.Resources {
			def, node, _ := strings.Cut(key, "/")
			if !r.Deleting {
				holders[def] = append(holders[def], node)
			}
		}
		for def, nodes := range holders {
			slices.Sort(nodes)
			key := strings.Join(nodes, ",")
			if was, ok := written[def]; ok && was == key {
				continue
			}
			if err := place(def, nodes); err == nil {
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
