package preempt

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// fakeAPIServer serves the Node list and watch requests of one node the way
// an API server does, in JSON: a list, a watch that streams the initial
// list (ADDED, then the bookmark that ends it) when asked to, and the
// node's later versions as MODIFIED events. It tests the REST client and its
// small scheme, which the fake clientset bypasses.
type fakeAPIServer struct {
	t       *testing.T
	node    *corev1.Node
	refuse  error             // when set, every request gets this API error
	updates chan *corev1.Node // versions sent to open watches

	mu       sync.Mutex
	requests []*http.Request
}

func newFakeAPIServer(t *testing.T, node *corev1.Node) *fakeAPIServer {
	node.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	node.ResourceVersion = "1"
	return &fakeAPIServer{t: t, node: node, updates: make(chan *corev1.Node, 16)}
}

// start serves s until the test ends and returns a client for it.
func (s *fakeAPIServer) start() NodeClient {
	s.t.Helper()
	srv := httptest.NewServer(s)
	s.t.Cleanup(srv.Close)
	client, err := newNodeClient(&rest.Config{Host: srv.URL})
	if err != nil {
		s.t.Fatalf("newNodeClient: %v", err)
	}
	return client
}

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Clone(r.Context()))
	s.mu.Unlock()
	if r.URL.Path != "/api/v1/nodes" {
		http.NotFound(w, r)
		return
	}
	if s.refuse != nil {
		var status apierrors.APIStatus
		errors.As(s.refuse, &status)
		st := status.Status()
		st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(st.Code))
		json.NewEncoder(w).Encode(st) //nolint:errcheck // the client sees a short body
		return
	}
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	if q.Get("watch") != "true" {
		list := corev1.NodeList{
			TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: s.node.ResourceVersion},
			Items:    []corev1.Node{*s.node},
		}
		json.NewEncoder(w).Encode(list) //nolint:errcheck // as above
		return
	}
	enc := json.NewEncoder(w)
	send := func(typ string, obj any) {
		enc.Encode(metav1.WatchEvent{Type: typ, Object: rawJSON(s.t, obj)}) //nolint:errcheck // as above
		w.(http.Flusher).Flush()
	}
	if q.Get("sendInitialEvents") == "true" {
		send("ADDED", s.node)
		send("BOOKMARK", &corev1.Node{
			TypeMeta: s.node.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				ResourceVersion: s.node.ResourceVersion,
				Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
			},
		})
	} else {
		w.(http.Flusher).Flush()
	}
	for {
		select {
		case node := <-s.updates:
			send("MODIFIED", node)
		case <-r.Context().Done():
			return
		}
	}
}

// rawJSON encodes obj for a watch event.
func rawJSON(t *testing.T, obj any) runtime.RawExtension {
	b, err := json.Marshal(obj)
	if err != nil {
		t.Errorf("encode %T: %v", obj, err)
	}
	return runtime.RawExtension{Raw: b}
}

// update sends version step of the node with taints to the open watches.
func (s *fakeAPIServer) update(step int, taints ...corev1.Taint) {
	node := newNode(s.node.Name, step, taints...)
	node.TypeMeta = s.node.TypeMeta
	node.ResourceVersion = strings.Repeat("1", step+1)
	s.updates <- node
}

// seenRequests returns the requests served so far.
func (s *fakeAPIServer) seenRequests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.requests...)
}

func TestInClusterClientWatchesTheNodeOnAnAPIServer(t *testing.T) {
	t.Parallel()
	api := newFakeAPIServer(t, newNode(testNode, 0))
	r := startWatchOn(t, api.start(), DefaultConfig(testNode))
	r.waitSeen(testNode, 0)
	api.update(1, taint(TaintClusterAutoscaler))
	if got := r.nextCall(); got != TaintClusterAutoscaler {
		t.Errorf("onTermination(%q), want %q", got, TaintClusterAutoscaler)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("Watch returned %v, want nil", err)
	}
	reqs := api.seenRequests()
	if len(reqs) == 0 {
		t.Fatal("no request reached the API server")
	}
	for _, req := range reqs {
		if got, want := req.URL.Query().Get("fieldSelector"), "metadata.name="+testNode; got != want {
			t.Errorf("%s with field selector %q, want %q", req.URL, got, want)
		}
		if got := req.Header.Get("User-Agent"); got != userAgent {
			t.Errorf("%s with User-Agent %q, want %q", req.URL, got, userAgent)
		}
		if got := req.Header.Get("Accept"); !strings.HasPrefix(got, "application/vnd.kubernetes.protobuf") {
			t.Errorf("%s with Accept %q, want protobuf first", req.URL, got)
		}
	}
}

func TestInClusterClientReportsARefusalAsErrNoAccess(t *testing.T) {
	t.Parallel()
	api := newFakeAPIServer(t, newNode(testNode, 0))
	api.refuse = apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC: no rule allows it"))
	err := Watch(t.Context(), api.start(), DefaultConfig(testNode), func(string) {
		t.Error("onTermination called on a refused watch")
	})
	if !errors.Is(err, ErrNoAccess) || !apierrors.IsForbidden(err) {
		t.Errorf("Watch returned %v, want ErrNoAccess wrapping a Forbidden API error", err)
	}
}
