package linstorsim

import (
	"fmt"
	"net/http"
	"time"
)

// playedFilterKeys are the select filter fields the stand-in plays on a resource group.
var playedFilterKeys = map[string]bool{"place_count": true, "storage_pool": true, "storage_pool_list": true}

// resourceGroupModify plays PUT /v1/resource-groups/{resource_group}. As LINSTOR does, a
// modify that sets the place count applies it to the group's existing resource definitions
// at once: every definition with fewer diskful replicas is autoplaced up to it, within the
// same request (linstor-server#222 is about the one case where LINSTOR does not: a
// definition moved to another group). With Options.SlowGroupModify that request plays
// linstor-server#253.
func resourceGroupModify(s *Server, c *call) (int, any) {
	var body struct {
		propsModify
		Description  *string        `json:"description"`
		SelectFilter map[string]any `json:"select_filter"`
		PeerSlots    *int32         `json:"peer_slots"`
		SnapNames    []string       `json:"snap_names"`
		CopyAllSnaps *bool          `json:"copy_all_snaps"`
	}
	if err := c.decode(&body); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.badBody(c, err)
	}
	s.mu.Lock()
	now := time.Now()
	s.advance(now)
	unlock := true
	defer func() {
		if unlock {
			s.mu.Unlock()
		}
	}()
	if body.PeerSlots != nil || len(body.SnapNames) > 0 || body.CopyAllSnaps != nil {
		return s.unplayed(c, "peer slots or snapshots in a resource group modify")
	}
	for key := range body.SelectFilter {
		if !playedFilterKeys[key] {
			return s.unplayed(c, fmt.Sprintf("the select filter's %s", key))
		}
	}
	var a answer
	name := c.params["resource_group"]
	g := s.st.groups[name]
	if g == nil {
		a.add(maskError|maskRscGrp|maskMod|codeNotFoundRscGrp, fmt.Sprintf("Resource group '%s' not found.", name))
		return a.status(http.StatusOK), a
	}
	if a := checkProps(body.propsModify, onGroup, maskRscGrp); a.failed() {
		return a.status(http.StatusOK), a
	}
	count, setsCount := number(body.SelectFilter["place_count"])
	if setsCount && count < 1 {
		rc := a.add(maskError|maskRscGrp|maskMod|codeInvldPlaceCount, fmt.Sprintf("Invalid place count %v.", body.SelectFilter["place_count"]))
		rc.Correction = "Give a place count of at least 1."
		return a.status(http.StatusOK), a
	}
	if body.Description != nil {
		g.description = *body.Description
	}
	body.apply(g.props)
	for k, v := range body.SelectFilter {
		g.filter[k] = v
	}
	rc := a.add(maskRscGrp|maskMod|codeModified, fmt.Sprintf("Resource group '%s' modified.", name))
	rc.Details = fmt.Sprintf("Resource group '%s' UUID is: %s", name, g.uuid)
	if !setsCount {
		return http.StatusOK, a
	}
	var below []*definition
	for _, dn := range sortedKeys(s.st.definitions) {
		d := s.st.definitions[dn]
		if d.group == name && s.st.diskfulCount(dn) < int(g.placeCount()) {
			below = append(below, d)
		}
	}
	if slow := s.opts.SlowGroupModify; slow != nil && len(below) > 0 {
		s.slow.Add(1)
		go s.placeSlowly(below, *slow)
		unlock = false
		s.mu.Unlock()
		s.hold(c.req.Context())
		return 0, nil
	}
	for _, d := range below {
		a = append(a, s.autoplace(d, int(g.placeCount())-s.st.diskfulCount(d.name), now)...)
	}
	return a.status(http.StatusOK), a
}

// placeSlowly autoplaces the definitions one after the other as linstor-server#253 saw it.
func (s *Server) placeSlowly(defs []*definition, slow SlowGroupModify) {
	defer s.slow.Done()
	placed, replicas := 0, 0
	for _, d := range defs {
		if placed >= slow.Placed {
			return
		}
		select {
		case <-time.After(slow.PerResource):
		case <-s.closing:
			return
		}
		s.mu.Lock()
		now := time.Now()
		s.advance(now)
		if s.st.definitions[d.name] != d {
			s.mu.Unlock()
			continue
		}
		before := map[string]bool{}
		for _, r := range s.st.resourcesOf(d.name) {
			before[r.node] = true
		}
		missing := int(s.st.groupOf(d).placeCount()) - s.st.diskfulCount(d.name)
		if missing > 0 && !s.autoplace(d, missing, now).failed() {
			placed++
			for _, r := range s.st.resourcesOf(d.name) {
				if before[r.node] {
					continue
				}
				replicas++
				if slow.StandAloneEvery > 0 && replicas%slow.StandAloneEvery == 0 {
					r.standAlone = true
				}
			}
		}
		s.mu.Unlock()
	}
}
