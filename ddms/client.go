package ddms

import (
	"context"
	"fmt"
)

// Transport carries DDM packets. *jdwp.Conn implements it; tests can fake it.
type Transport interface {
	// Start writes one command packet and returns a function that waits
	// for its reply data.
	Start(cmdSet, cmd uint8, data []byte) (wait func(context.Context) ([]byte, error), err error)
	// Send writes one command packet whose reply, if any, is not awaited.
	Send(cmdSet, cmd uint8, data []byte) error
}

// OwnedStarter is a Transport that can read a reply into a buffer lent to
// the caller (*jdwp.Conn.StartOwned): whenever the wait returns data, with
// or without an error, the caller owns it and gives it back to where the
// transport lends from.
type OwnedStarter interface {
	StartOwned(cmdSet, cmd uint8, data []byte) (wait func(context.Context) ([]byte, error), err error)
}

// Client speaks DDM to one VM.
type Client struct {
	t Transport
}

// NewClient returns a Client over t.
func NewClient(t Transport) *Client { return &Client{t: t} }

// Start writes a request chunk and returns a function that waits for the
// reply chunk. The reply must be of type t or FAIL; a FAIL reply is returned
// as *FailError and a reply with no data as ErrEmptyReply.
func (c *Client) Start(t Type, payload []byte) (wait func(context.Context) ([]byte, error), err error) {
	w, err := c.t.Start(CommandSet, Command, EncodeChunk(t, payload))
	if err != nil {
		return nil, fmt.Errorf("ddms: sending %v: %w", t, err)
	}
	return func(ctx context.Context) ([]byte, error) {
		data, err := w(ctx)
		if err != nil {
			return nil, fmt.Errorf("ddms: %v reply: %w", t, err)
		}
		return replyPayload(t, data)
	}, nil
}

func replyPayload(t Type, data []byte) ([]byte, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%v: %w", t, ErrEmptyReply)
	}
	ch, err := DecodeChunk(data)
	if err != nil {
		return nil, fmt.Errorf("ddms: %v reply: %w", t, err)
	}
	switch ch.Type {
	case t:
		return ch.Data, nil
	case FAIL:
		fe, err := DecodeFail(ch.Data)
		if err != nil {
			return nil, fmt.Errorf("ddms: %v reply: %w", t, err)
		}
		return nil, fe
	default:
		return nil, fmt.Errorf("%w %v reply: chunk type %v", ErrMalformed, t, ch.Type)
	}
}

// Request sends a request chunk and waits for its reply payload.
func (c *Client) Request(ctx context.Context, t Type, payload []byte) ([]byte, error) {
	wait, err := c.Start(t, payload)
	if err != nil {
		return nil, err
	}
	return wait(ctx)
}

// Send writes a chunk without waiting for any reply.
func (c *Client) Send(t Type, payload []byte) error {
	if err := c.t.Send(CommandSet, Command, EncodeChunk(t, payload)); err != nil {
		return fmt.Errorf("ddms: sending %v: %w", t, err)
	}
	return nil
}

// Hello exchanges HELO with the VM.
func (c *Client) Hello(ctx context.Context) (*Hello, error) {
	b, err := c.Request(ctx, HELO, EncodeHelloRequest(ClientProtocolVersion))
	if err != nil {
		return nil, err
	}
	return DecodeHello(b)
}

// Features asks the VM for its feature list.
func (c *Client) Features(ctx context.Context) ([]string, error) {
	b, err := c.Request(ctx, FEAT, nil)
	if err != nil {
		return nil, err
	}
	return DecodeFeatures(b)
}

// SetAllocTracking sends REAE without waiting: VMs on Android 9 and later
// never answer it (protocol.md, section 5). Confirm with AllocTracking.
func (c *Client) SetAllocTracking(on bool) error {
	return c.Send(REAE, EncodeBool(on))
}

// AllocTracking asks whether allocation tracking is on (REAQ). A VM that
// never answers makes this wait for ctx: Android 12+ on the DDM-only path.
func (c *Client) AllocTracking(ctx context.Context) (bool, error) {
	b, err := c.Request(ctx, REAQ, nil)
	if err != nil {
		return false, err
	}
	return DecodeBool("REAQ reply", b)
}

// StartAllocations writes a REAL request and returns a function that waits
// for the report payload, so that other packets can follow the request
// before its reply arrives.
func (c *Client) StartAllocations() (wait func(context.Context) ([]byte, error), err error) {
	return c.Start(REAL, nil)
}

// StartAllocationsOwned is StartAllocations over a transport that lends
// reply buffers (OwnedStarter): wait also returns the reply's whole
// packet data, raw, which the caller owns whenever it is not nil, error or
// not, and gives back once done with the payload (a part of it). Over
// another transport it is StartAllocations, and raw is the caller's to
// drop.
func (c *Client) StartAllocationsOwned() (wait func(context.Context) (payload, raw []byte, err error), err error) {
	start := c.t.Start
	if o, ok := c.t.(OwnedStarter); ok {
		start = o.StartOwned
	}
	w, err := start(CommandSet, Command, EncodeChunk(REAL, nil))
	if err != nil {
		return nil, fmt.Errorf("ddms: sending %v: %w", REAL, err)
	}
	return func(ctx context.Context) ([]byte, []byte, error) {
		data, err := w(ctx)
		if err != nil {
			return nil, data, fmt.Errorf("ddms: %v reply: %w", REAL, err)
		}
		payload, err := replyPayload(REAL, data)
		return payload, data, err
	}, nil
}

// Allocations fetches the allocation report (REAL) payload.
func (c *Client) Allocations(ctx context.Context) ([]byte, error) {
	return c.Request(ctx, REAL, nil)
}
