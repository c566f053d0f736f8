package emitter

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentplane/agentplane/libs/logging"
	"github.com/agentplane/agentplane/libs/redact"
)

// maxNote is the API's limit on an event note (events.k8s.io/v1).
const maxNote = 1024

// Run chooses the Events API and writes queued events until ctx ends.
func (e *Emitter) Run(ctx context.Context) error {
	api, err := e.chooseAPI()
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.api = api
	e.mu.Unlock()
	logging.FromContext(ctx).Info("writing events", "api", string(api))
	for {
		select {
		case <-ctx.Done():
			return nil
		case o := <-e.queue:
			e.write(ctx, o)
			e.unwritten.Add(-1)
		}
	}
}

// pending returns how many accepted events are queued or being written.
func (e *Emitter) pending() int64 { return e.unwritten.Load() }

// API returns the Events API in use (empty until Run has chosen).
func (e *Emitter) API() API {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.api
}

func (e *Emitter) chooseAPI() (API, error) {
	if e.cfg.API != APIAuto {
		return e.cfg.API, nil
	}
	_, err := e.kube.Discovery().ServerResourcesForGroupVersion(eventsv1.SchemeGroupVersion.String())
	switch {
	case err == nil:
		return APIEventsV1, nil
	case apierrors.IsNotFound(err):
		return APICoreV1, nil
	default:
		return "", fmt.Errorf("discover the Events API: %w", err)
	}
}

func (e *Emitter) write(ctx context.Context, o op) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev := o.ev
	ev.Note = redact.Truncate(e.secrets.redactorFor(ctx, e.dyn, ev.Regarding).String(ev.Note), maxNote)

	e.mu.Lock()
	s := e.series[o.key]
	if s == nil { // forgotten meanwhile: start afresh
		s = &series{count: 1, first: e.now(), last: e.now()}
		e.series[o.key] = s
	}
	create := s.name == ""
	s.creating = create
	count, first, last, name, api := s.count, s.first, s.last, s.name, e.api
	e.mu.Unlock()

	var err error
	if create {
		name, err = e.create(ctx, api, ev, count, first, last)
	} else {
		err = e.bump(ctx, api, ev.Regarding.Namespace, name, count, last)
		if apierrors.IsNotFound(err) { // the event expired: create a new one
			name, err = e.create(ctx, api, ev, count, first, last)
		}
	}
	result := "ok"
	if err != nil {
		result = "error"
		logging.FromContext(ctx).Warn("write event", "api", string(api), "reason", ev.Reason,
			"object", ev.Regarding.Kind+"/"+ev.Regarding.Namespace+"/"+ev.Regarding.Name, "err", redact.String(err.Error()))
	}
	e.metrics.writes.WithLabelValues(string(api), result).Inc()
	e.mu.Lock()
	s.creating = false
	if err == nil {
		s.name = name
	}
	e.mu.Unlock()
}

// eventName follows client-go: the object's name and a unique hex time suffix.
func eventName(ev Event, t time.Time) string {
	return fmt.Sprintf("%s.%x", ev.Regarding.Name, t.UnixNano())
}

func (e *Emitter) create(ctx context.Context, api API, ev Event, count int32, first, last time.Time) (string, error) {
	ns := ev.Regarding.Namespace
	name := eventName(ev, first)
	if api == APIEventsV1 {
		obj := &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: ns},
			EventTime:           metav1.NewMicroTime(first),
			Regarding:           ev.Regarding,
			Reason:              ev.Reason,
			Note:                ev.Note,
			Type:                ev.Type,
			Action:              ev.Action,
			ReportingController: ev.ReportingController,
			ReportingInstance:   ev.ReportingInstance,
		}
		if count > 1 {
			obj.Series = &eventsv1.EventSeries{Count: count, LastObservedTime: metav1.NewMicroTime(last)}
		}
		_, err := e.kube.EventsV1().Events(ns).Create(ctx, obj, metav1.CreateOptions{})
		return name, err
	}
	obj := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: ns},
		InvolvedObject:      ev.Regarding,
		Reason:              ev.Reason,
		Message:             ev.Note,
		Type:                ev.Type,
		Action:              ev.Action,
		Source:              corev1.EventSource{Component: ev.ReportingController},
		ReportingController: ev.ReportingController,
		ReportingInstance:   ev.ReportingInstance,
		FirstTimestamp:      metav1.NewTime(first),
		LastTimestamp:       metav1.NewTime(last),
		Count:               count,
	}
	_, err := e.kube.CoreV1().Events(ns).Create(ctx, obj, metav1.CreateOptions{})
	return name, err
}

func (e *Emitter) bump(ctx context.Context, api API, ns, name string, count int32, last time.Time) error {
	var patch any
	if api == APIEventsV1 {
		patch = map[string]any{"series": map[string]any{"count": count, "lastObservedTime": metav1.NewMicroTime(last)}}
	} else {
		patch = map[string]any{"count": count, "lastTimestamp": metav1.NewTime(last)}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if api == APIEventsV1 {
		_, err = e.kube.EventsV1().Events(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	} else {
		_, err = e.kube.CoreV1().Events(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	}
	return err
}
