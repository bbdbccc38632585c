package autoscale

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringside/ringside/telemetry"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	krecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
)

const testNS = "team"

// fixture is a controller on fakes of the API (the dynamic client, which
// also serves the targets' scale subresource, and a typed client of pods)
// and a real embedded etcd. Its caches are filled by hand, as
// sample-controller's tests do, so a test drives sync step by step.
type fixture struct {
	t    *testing.T
	c    *Controller
	dyn  *dynamicfake.FakeDynamicClient
	kube *kubefake.Clientset
	// scales are dyn's reactors and actions: the scale subresource is
	// read and written through the dynamic client.
	scales *k8stesting.Fake
	events *krecord.FakeRecorder
	etcd   *clientv3.Client
	reg    *prometheus.Registry
	clock  *clocktesting.FakePassiveClock

	mu sync.Mutex
	// replicas are the StatefulSets' spec.replicas by name; a name not
	// here is a missing target.
	replicas map[string]int32
}

func newFixture(t *testing.T, etcd *clientv3.Client, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{
		t:        t,
		dyn:      dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{v1alpha1.Resource: "ElasticScalerList"}, objs...),
		kube:     kubefake.NewClientset(),
		events:   krecord.NewFakeRecorder(100),
		etcd:     etcd,
		reg:      telemetry.NewRegistry(),
		clock:    clocktesting.NewFakePassiveClock(time.Now()),
		replicas: map[string]int32{},
	}
	f.scales = &f.dyn.Fake
	// In front of the fake's object tracker, which has no subresources.
	f.scales.PrependReactor("get", "statefulsets", onScale(f.getScale))
	f.scales.PrependReactor("update", "statefulsets", onScale(f.updateScale))
	// What an API server answers for a resource without a scale
	// subresource.
	f.scales.PrependReactor("get", "configmaps", onScale(func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps/scale"}, a.(k8stesting.GetAction).GetName())
	}))
	mapper := staticMapper{
		{Group: "apps", Kind: "StatefulSet"}: appsv1.SchemeGroupVersion.WithResource("statefulsets"),
		{Kind: "ConfigMap"}:                  corev1.SchemeGroupVersion.WithResource("configmaps"),
	}
	cfg := DefaultConfig()
	cfg.LeaderElection.Enabled = false
	cfg.MeasureSettle = 0 // the seeded heartbeats are of a settled generation
	c, err := New(cfg, Deps{Dynamic: f.dyn, Pods: func(ns string) PodClient { return fakePods{f.kube.CoreV1().Pods(ns)} },
		Nodes:  f.kube.CoreV1().Nodes(),
		Scales: dynamicScales{dyn: f.dyn}, Mapper: mapper, Etcd: etcd,
		Events: f.events, Clock: f.clock, Metrics: f.reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	for _, o := range objs {
		f.cache(o.(*unstructured.Unstructured))
	}
	return f
}

// onScale is reactor r for the scale subresource only.
func onScale(r k8stesting.ReactionFunc) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		return r(a)
	}
}

// fakePods are a fake clientset's pods; like the clientset, they tell an
// informer that they cannot stream a list through a watch.
type fakePods struct{ PodClient }

func (fakePods) IsWatchListSemanticsUnSupported() bool { return true }

// staticMapper maps each kind to one resource, as discovery would.
type staticMapper map[schema.GroupKind]schema.GroupVersionResource

func (m staticMapper) Resources(_ context.Context, gk schema.GroupKind, versions ...string) ([]schema.GroupVersionResource, error) {
	r, ok := m[gk]
	if !ok || len(versions) > 0 && versions[0] != r.Version {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return []schema.GroupVersionResource{r}, nil
}

func (f *fixture) getScale(a k8stesting.Action) (bool, runtime.Object, error) {
	name := a.(k8stesting.GetAction).GetName()
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.replicas[name]
	if !ok {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, name)
	}
	return true, unstructuredScale(f.t, &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.GetNamespace()},
		Spec:       autoscalingv1.ScaleSpec{Replicas: n},
		Status:     autoscalingv1.ScaleStatus{Replicas: n, Selector: "app=" + name},
	}), nil
}

func (f *fixture) updateScale(a k8stesting.Action) (bool, runtime.Object, error) {
	u := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured)
	sc, err := scaleFrom(u)
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas[sc.Name] = sc.Spec.Replicas
	return true, u, nil
}

// unstructuredScale is sc as the scale subresource serves it.
func unstructuredScale(t *testing.T, sc *autoscalingv1.Scale) *unstructured.Unstructured {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sc)
	if err != nil {
		t.Error(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	return u
}

func (f *fixture) target(name string, replicas int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas[name] = replicas
}

func (f *fixture) targetReplicas(name string) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replicas[name]
}

func (f *fixture) cache(u *unstructured.Unstructured) {
	f.t.Helper()
	if err := f.c.scalerInformer.GetIndexer().Add(u); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) cachePod(p *corev1.Pod) {
	f.t.Helper()
	if err := f.c.podInformer.GetIndexer().Add(p); err != nil {
		f.t.Fatal(err)
	}
}

// sync syncs the scaler name and then, as the informer's watch would,
// puts what the API holds now into the cache.
func (f *fixture) sync(name string) error {
	f.t.Helper()
	err := f.c.sync(context.Background(), testNS+"/"+name)
	u, gerr := f.dyn.Resource(v1alpha1.Resource).Namespace(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if gerr == nil {
		f.cache(u)
	}
	return err
}

// stored is the scaler as the API holds it.
func (f *fixture) stored(name string) *v1alpha1.ElasticScaler {
	f.t.Helper()
	u, err := f.dyn.Resource(v1alpha1.Resource).Namespace(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	// Only the status: the spec may be as odd as the test made it.
	es := &v1alpha1.ElasticScaler{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Generation: u.GetGeneration()}}
	status, _ := u.Object["status"].(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(status, &es.Status); err != nil {
		f.t.Fatalf("the stored status does not decode: %v", err)
	}
	return es
}

// writes counts the writes made through the fakes: status updates,
// scale updates and Events.
type writes struct{ status, scale, events int }

func (f *fixture) writes() writes {
	var w writes
	for _, a := range f.dyn.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" || a.GetVerb() == "patch" || a.GetVerb() == "create" {
			w.status++
		}
	}
	for _, a := range f.scales.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "scale" {
			w.scale++
		}
	}
	w.events = len(f.events.Events)
	return w
}

// drainEvents returns the Events recorded so far.
func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// scaler returns an ElasticScaler of a StatefulSet named name+"-workers"
// and a job named name, min 1 and max 4, after mutate.
func scaler(name string, mutate ...func(*v1alpha1.ElasticScaler)) *unstructured.Unstructured {
	es := &v1alpha1.ElasticScaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ElasticScaler"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Generation: 1, UID: types.UID("uid-" + name)},
		Spec: v1alpha1.ElasticScalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name + "-workers"},
			Job:            v1alpha1.JobReference{Name: name},
			MinReplicas:    1, MaxReplicas: 4, Unit: 1, TargetEfficiency: 0.7, PendingTimeoutSeconds: 120,
		},
	}
	for _, m := range mutate {
		m(es)
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(es)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// rawScaler returns a scaler named name whose spec (and status) are the
// JSON given, as an object that slipped past the schema would be.
func rawScaler(name, spec, status string) *unstructured.Unstructured {
	doc := fmt.Sprintf(`{"apiVersion":"ringside.dev/v1alpha1","kind":"ElasticScaler","metadata":{"name":%q,"namespace":%q,"generation":1}`, name, testNS)
	if spec != "" {
		doc += `,"spec":` + spec
	}
	if status != "" {
		doc += `,"status":` + status
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(doc + "}")); err != nil {
		panic(err)
	}
	return u
}

// worker is one member of a job seeded in etcd.
type worker struct {
	id            string
	samplesPerSec float64
	// beatGen is the generation of its heartbeat (0: the job's).
	beatGen int64
	// age is how old its heartbeat is; none: it has stored none.
	age  time.Duration
	none bool
	// gns is the gradient noise scale it reports (nil: none).
	gns *float64
}

// seedJob writes a job the way its sidecars and leader do: a member
// record per worker, the committed generation of them all (gen 0: none)
// and each worker's heartbeat.
func seedJob(t *testing.T, etcd *clientv3.Client, job string, gen int64, workers ...worker) {
	t.Helper()
	ctx := context.Background()
	prefix := record.Prefix(testNS, job)
	put := func(key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Put(ctx, prefix+key, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	g := record.Generation{Number: gen, MasterPort: 29500, Leader: "w0", Reason: "test"}
	for i, w := range workers {
		addr := fmt.Sprintf("10.0.0.%d", i+1)
		put(record.MembersDir+w.id, record.MemberInfo{ID: w.id, Addr: addr, Slots: 1, State: record.StateActive})
		g.Members = append(g.Members, record.RankedMember{ID: w.id, Addr: addr, Rank: i, Slots: 1})
		if w.none {
			continue
		}
		beatGen := w.beatGen
		if beatGen == 0 {
			beatGen = gen
		}
		put(record.StatusDir+w.id, record.Status{Step: 10, Samples: 640, SamplesPerSec: w.samplesPerSec, StepTimeS: 0.5,
			StepTimeP50S: 0.5, Generation: beatGen, Time: time.Now().Add(-w.age), GNS: w.gns})
	}
	if gen > 0 {
		g.WorldSize, g.MasterAddr = len(workers), "10.0.0.1"
		put(record.GenerationKey, g)
	}
}

func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	return etcdtest.Client(t, etcdtest.Start(t))
}

func condition(es *v1alpha1.ElasticScaler, typ string) *metav1.Condition {
	return meta.FindStatusCondition(es.Status.Conditions, typ)
}

// wantCondition fails unless es has condition typ with status and reason,
// and a message holding msg.
func wantCondition(t *testing.T, es *v1alpha1.ElasticScaler, typ string, status metav1.ConditionStatus, reason, msg string) {
	t.Helper()
	c := condition(es, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, es.Status.Conditions)
	}
	if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
		t.Fatalf("%s = %s/%s %q, want %s/%s with %q", typ, c.Status, c.Reason, c.Message, status, reason, msg)
	}
}

// rescaled returns a channel closed at the first update of a
// StatefulSet's scale.
func (f *fixture) rescaled() <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	f.scales.PrependReactor("update", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(ch) })
		return false, nil, nil
	})
	return ch
}

// stopJob commits, over job's generation, the stop of trainer crashes
// with message why.
func stopJob(t *testing.T, etcd *clientv3.Client, job, why string) {
	t.Helper()
	key := record.Prefix(testNS, job) + record.GenerationKey
	resp, err := etcd.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read %s: %v", key, err)
	}
	g, err := record.DecodeGeneration(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	g.Number++
	g.Stop = &record.Stop{Message: why, ExitCode: 1}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(context.Background(), key, string(b)); err != nil {
		t.Fatal(err)
	}
}
