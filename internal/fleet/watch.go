package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The hub's watches of a member are its own, not client-go informers: an informer costs
// about ten goroutines and a copy of every object it watches, and the hub watches six
// resources on each of thousands of members. One watch here is one goroutine, which reads
// the stream and acts on each event itself, and keeps nothing but what its caller keeps.

// resource is one resource the hub lists and watches on a member.
type resource struct {
	// path is the collection's path, such as /apis/apps/v1/namespaces/nodewright-system/deployments.
	path string
	// fieldSelector narrows it, such as metadata.name=nodewright-operator.
	fieldSelector string
	// metadataOnly asks for PartialObjectMetadata: enough to learn that something changed.
	metadataOnly bool
}

const (
	acceptJSON             = "application/json"
	acceptMetadataList     = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	acceptMetadata         = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
	minWatchTimeoutSeconds = 300
)

// listed is a list's answer: its version and its items, undecoded.
type listed struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// list lists the resource; limit 0 lists all. A resource the member does not serve (an
// older member, its CRD missing) answers NotFound.
func (r resource) list(ctx context.Context, rc rest.Interface, limit int) (*listed, error) {
	req := rc.Get().AbsPath(r.path).SetHeader("Accept", acceptJSON)
	if r.metadataOnly {
		req.SetHeader("Accept", acceptMetadataList)
	}
	if r.fieldSelector != "" {
		req.Param("fieldSelector", r.fieldSelector)
	}
	if limit > 0 {
		req.Param("limit", strconv.Itoa(limit))
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var l listed
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("listing %s: %w", r.path, err)
	}
	return &l, nil
}

// watchEvent is one event of a watch's stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// errGone is a watch whose version the member no longer has (410): list again.
var errGone = errors.New("the watch's resource version is gone")

// watch watches the resource from version, calling each for every event that changes an
// object, until the stream ends; it returns the version to resume from. It returns errGone
// when the member no longer has the version, or the error that stopped the watch.
func (r resource) watch(ctx context.Context, rc rest.Interface, version string, each func(kind string, object json.RawMessage) error) (string, error) {
	req := rc.Get().AbsPath(r.path).Param("watch", "true").Param("resourceVersion", version).
		Param("allowWatchBookmarks", "true").
		// As a reflector does: the member ends the watch within 5 to 10 minutes, so that no
		// stream outlives a change of the member's mind (a new certificate, say) for long.
		Param("timeoutSeconds", strconv.Itoa(minWatchTimeoutSeconds+rand.IntN(minWatchTimeoutSeconds))).
		SetHeader("Accept", acceptJSON)
	if r.metadataOnly {
		req.SetHeader("Accept", acceptMetadata)
	}
	if r.fieldSelector != "" {
		req.Param("fieldSelector", r.fieldSelector)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
			return version, errGone
		}
		return version, err
	}
	defer func() { _ = body.Close() }()
	dec := json.NewDecoder(body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return version, ctx.Err()
			}
			return version, nil // the member ended the stream (its timeout), or the connection broke
		}
		switch ev.Type {
		case "ERROR":
			var status struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(ev.Object, &status)
			if status.Code == http.StatusGone {
				return version, errGone
			}
			return version, fmt.Errorf("watching %s: %d %s", r.path, status.Code, status.Message)
		case "ADDED", "MODIFIED", "DELETED":
			if err := each(ev.Type, ev.Object); err != nil {
				return version, err
			}
		case "BOOKMARK":
		default:
			return version, fmt.Errorf("watching %s: an event of unknown type %q", r.path, ev.Type)
		}
		if v := resourceVersionOf(ev.Object); v != "" {
			version = v
		}
	}
}

// resourceVersionOf reads an object's metadata.resourceVersion, "" if it has none.
func resourceVersionOf(object json.RawMessage) string {
	var o struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(object, &o) != nil {
		return ""
	}
	return o.Metadata.ResourceVersion
}

// follow lists the resource and watches it from the list's version, again and again until
// ctx ends: onList gets each list's items, onEvent each event after it, and onError each
// failed list. A watch that cannot resume lists again; a failed list or watch is retried
// after a backoff (1 s doubling to 2 minutes), so that a member that refuses or closes its
// watches at once does not keep the hub busy.
func (r resource) follow(ctx context.Context, rc rest.Interface, listLimit int, onList func(*listed) error,
	onEvent func(kind string, object json.RawMessage) error, onError func(error)) {
	retry := newBackoff()
	for ctx.Err() == nil {
		l, err := r.list(ctx, rc, listLimit)
		if err == nil {
			err = onList(l)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			onError(err)
			if !sleep(ctx, retry.next()) {
				return
			}
			continue
		}
		version := l.Metadata.ResourceVersion
		for ctx.Err() == nil {
			start := time.Now()
			next, err := r.watch(ctx, rc, version, onEvent)
			if errors.Is(err, errGone) || ctx.Err() != nil {
				break
			}
			version = next
			// A watch that ended at once is retried later; events are not lost meanwhile:
			// the next watch resumes from the version.
			if err == nil && time.Since(start) > 10*time.Second {
				retry.reset()
			} else if !sleep(ctx, retry.next()) {
				return
			}
		}
	}
}

// restReader lists the member's workflows and NodewrightAgentStatuses for the readers
// (readWorkflows, readBoots) straight from its API server, a page at a time, with the
// member's REST client: no RESTMapper, no discovery, no typed client per member.
type restReader struct {
	rc rest.Interface
}

var _ client.Reader = restReader{}

// Get is not how the hub reads a member's workflows or nodes.
func (r restReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return fmt.Errorf("the hub does not get %T %s from a member", obj, key)
}

// listPaths are the collections restReader lists, by the type of the list.
var listPaths = map[reflect.Type]string{
	reflect.TypeFor[*nodewrightv1alpha1.BondModeFlipPlanList]():      "/apis/" + nodewrightv1alpha1.GroupVersion.String() + "/bondmodeflipplans",
	reflect.TypeFor[*nodewrightv1alpha1.ReplicationUpgradeList]():    "/apis/" + nodewrightv1alpha1.GroupVersion.String() + "/replicationupgrades",
	reflect.TypeFor[*nodewrightv1alpha1.NodewrightAgentStatusList](): "/apis/" + nodewrightv1alpha1.GroupVersion.String() + "/nodewrightagentstatuses",
}

// List lists one page into list: the options' limit and continuation alone apply.
func (r restReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	path, ok := listPaths[reflect.TypeOf(list)]
	if !ok {
		return fmt.Errorf("the hub does not list %T from a member", list)
	}
	o := (&client.ListOptions{}).ApplyOptions(opts)
	req := r.rc.Get().AbsPath(path).SetHeader("Accept", acceptJSON)
	if o.Limit > 0 {
		req.Param("limit", strconv.FormatInt(o.Limit, 10))
	}
	if o.Continue != "" {
		req.Param("continue", o.Continue)
	}
	raw, err := req.Do(ctx).Raw()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, list); err != nil {
		return fmt.Errorf("listing %s: %w", path, err)
	}
	return nil
}
