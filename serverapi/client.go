// Package serverapi calls a Petrel server's admin API from Go: rooms,
// participants, their metadata and permissions, data from the server
// (docs/protocol.md, "Server API").
package serverapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
)

// Identity is the identity of the admin tokens the client signs.
const Identity = "server-api"

// tokenTTL is the life of the admin token signed for each call.
const tokenTTL = time.Minute

// Client calls one server with admin tokens signed by an API key's secret.
type Client struct {
	base string
	keys auth.Keys
	key  string
	// HTTP is the client requests go through (http.DefaultClient by default).
	HTTP *http.Client
}

// New returns a client of the server at baseURL (http://host:port) that signs
// its calls with the secret of key.
func New(baseURL, key, secret string) *Client {
	return &Client{base: baseURL, keys: auth.Keys{key: secret}, key: key, HTTP: http.DefaultClient}
}

// Error is the server's refusal of a call: the HTTP status and the protocol
// error code (not_found, bad_request, ...).
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// ListRooms lists the server's rooms.
func (c *Client) ListRooms(ctx context.Context) ([]protocol.RoomInfo, error) {
	var out []protocol.RoomInfo
	return out, c.call(ctx, "GET", "/v1/admin/rooms", nil, &out)
}

// CreateRoom opens a room that stays open when empty.
func (c *Client) CreateRoom(ctx context.Context, name string, maxParticipants int, metadata string) (protocol.RoomInfo, error) {
	var out protocol.RoomInfo
	body := map[string]any{"name": name, "maxParticipants": maxParticipants, "metadata": metadata}
	return out, c.call(ctx, "POST", "/v1/admin/rooms", body, &out)
}

// DeleteRoom closes a room, removing everyone.
func (c *Client) DeleteRoom(ctx context.Context, room string) error {
	return c.call(ctx, "DELETE", "/v1/admin/rooms/"+url.PathEscape(room), nil, nil)
}

// ListParticipants lists a room's visible participants.
func (c *Client) ListParticipants(ctx context.Context, room string) ([]protocol.ParticipantInfo, error) {
	var out []protocol.ParticipantInfo
	return out, c.call(ctx, "GET", participantsPath(room), nil, &out)
}

// UpdateParticipant changes a participant's name, metadata and permissions
// (the fields given) and returns it as it now is.
func (c *Client) UpdateParticipant(ctx context.Context, room, identity string, u protocol.UpdateParticipant) (protocol.ParticipantInfo, error) {
	var out protocol.ParticipantInfo
	return out, c.call(ctx, "PATCH", participantsPath(room)+"/"+url.PathEscape(identity), u, &out)
}

// RemoveParticipant removes (kicks) a participant.
func (c *Client) RemoveParticipant(ctx context.Context, room, identity string) error {
	return c.call(ctx, "DELETE", participantsPath(room)+"/"+url.PathEscape(identity), nil, nil)
}

// MuteTrack mutes or unmutes a participant's published track.
func (c *Client) MuteTrack(ctx context.Context, room, identity, trackSid string, muted bool) error {
	path := participantsPath(room) + "/" + url.PathEscape(identity) + "/tracks/" + url.PathEscape(trackSid) + "/mute"
	return c.call(ctx, "POST", path, map[string]bool{"muted": muted}, nil)
}

// SendData sends a data message from the server to a room and returns how
// many participants received it.
func (c *Client) SendData(ctx context.Context, room string, d protocol.SendData) (int, error) {
	var out struct {
		Delivered int `json:"delivered"`
	}
	err := c.call(ctx, "POST", "/v1/admin/rooms/"+url.PathEscape(room)+"/data", d, &out)
	return out.Delivered, err
}

func participantsPath(room string) string {
	return "/v1/admin/rooms/" + url.PathEscape(room) + "/participants"
}

// maxAnswer bounds what is read of an answer.
const maxAnswer = 16 << 20

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	claims := auth.Claims{Grants: auth.Grants{Admin: true}}
	claims.Subject = Identity
	tok, err := c.keys.Sign(c.key, claims, tokenTTL)
	if err != nil {
		return err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		var msg struct{ Code, Message string }
		if json.Unmarshal(b, &msg) == nil {
			e.Code, e.Message = msg.Code, msg.Message
		} else {
			e.Message = string(b)
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: answer: %w", method, path, err)
	}
	return nil
}

// MoveParticipant sends a participant to another room: its client gets a
// token for it and joins it, publishing the same tracks.
func (c *Client) MoveParticipant(ctx context.Context, room, identity, to string) error {
	return c.call(ctx, "POST", participantsPath(room)+"/"+url.PathEscape(identity)+"/move", protocol.MoveParticipant{Room: to}, nil)
}

// CreateIngress makes a stream key for an RTMP or SRT encoder to publish
// into in.Room as in.Identity; the answer holds the key and the URL.
func (c *Client) CreateIngress(ctx context.Context, in protocol.CreateIngress) (protocol.IngressInfo, error) {
	var out protocol.IngressInfo
	return out, c.call(ctx, "POST", "/v1/admin/ingress", in, &out)
}

// ListIngress lists the ingresses with their state.
func (c *Client) ListIngress(ctx context.Context) ([]protocol.IngressInfo, error) {
	var out []protocol.IngressInfo
	return out, c.call(ctx, "GET", "/v1/admin/ingress", nil, &out)
}

// DeleteIngress deletes an ingress: its key stops working and a publisher
// using it is disconnected.
func (c *Client) DeleteIngress(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/admin/ingress/"+url.PathEscape(id), nil, nil)
}

// StartEgress pushes a participant's camera and microphone, or the tracks
// named, to an RTMP URL; the answer is the egress, starting.
func (c *Client) StartEgress(ctx context.Context, in protocol.CreateEgress) (protocol.EgressInfo, error) {
	var out protocol.EgressInfo
	return out, c.call(ctx, "POST", "/v1/admin/egress", in, &out)
}

// ListEgress lists the egresses with their state, the ended ones included
// for a while.
func (c *Client) ListEgress(ctx context.Context) ([]protocol.EgressInfo, error) {
	var out []protocol.EgressInfo
	return out, c.call(ctx, "GET", "/v1/admin/egress", nil, &out)
}

// StopEgress stops an egress; the answer is the egress, ending.
func (c *Client) StopEgress(ctx context.Context, id string) (protocol.EgressInfo, error) {
	var out protocol.EgressInfo
	return out, c.call(ctx, "DELETE", "/v1/admin/egress/"+url.PathEscape(id), nil, &out)
}
