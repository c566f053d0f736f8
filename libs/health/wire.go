package health

import (
	"encoding/json"
	"time"
)

// wireEvent is an event's JSON as the seed shows it: a snapshot has items, a delta has changes,
// an error has a message, a heartbeat has neither; every event has generated_at, and the cursor.
// A delta of a hub fed with Apply may also name the components it removed.
type wireEvent struct {
	Type        EventType `json:"type"`
	GeneratedAt string    `json:"generated_at"`
	Items       *[]Item   `json:"items,omitempty"`
	Changes     *[]Item   `json:"changes,omitempty"`
	Removed     []string  `json:"removed,omitempty"`
	Message     string    `json:"message,omitempty"`
	Cursor      string    `json:"cursor,omitempty"`
}

// MarshalJSON writes the seed's event schema.
func (e Event) MarshalJSON() ([]byte, error) {
	w := wireEvent{Type: e.Type, GeneratedAt: e.GeneratedAt.UTC().Format(time.RFC3339), Removed: e.Removed, Message: e.Message, Cursor: e.Cursor}
	items := e.Items
	if items == nil {
		items = []Item{}
	}
	switch e.Type {
	case Snapshot:
		w.Items = &items
	case Delta:
		w.Changes = &items
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the seed's event schema.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Event{Type: w.Type, Removed: w.Removed, Message: w.Message, Cursor: w.Cursor}
	if w.GeneratedAt != "" {
		t, err := time.Parse(time.RFC3339, w.GeneratedAt)
		if err != nil {
			return err
		}
		e.GeneratedAt = t
	}
	switch {
	case w.Items != nil:
		e.Items = *w.Items
	case w.Changes != nil:
		e.Items = *w.Changes
	}
	return nil
}
