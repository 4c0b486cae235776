// Package rendezvous hands one communicator id from rank 0 to the other
// ranks of a job over TCP: rank 0 serves it (Server) until every other rank
// has confirmed receipt, the others fetch it (Fetch), retrying until their
// context is done. It knows nothing of devices; package cluster builds the
// id and joins with it.
//
// The wire protocol is three messages on one connection, integers
// big-endian, every message starting with the magic "VYRZ" and the
// protocol version:
//
//	hello (rank -> rank 0):  magic[4] version[1] kindHello[1] rank[4] world[4]
//	reply (rank 0 -> rank):  magic[4] version[1] kindID|kindRefused[1] length[2] payload[length]
//	ack   (rank -> rank 0):  magic[4] version[1] kindAck[1] rank[4]
//
// The payload of kindID is the 128-byte id; that of kindRefused says why
// rank 0 refused (another world size, a rank out of range, another
// protocol version). Every connection has a deadline on both sides.
package rendezvous

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// Version is the protocol version this package speaks.
const Version = 1

// IDLen is the length of the id a reply carries.
const IDLen = len(driver.CommID{})

const (
	magic      = "VYRZ"
	headerLen  = len(magic) + 2 // magic, version, kind
	helloLen   = headerLen + 8
	ackLen     = headerLen + 4
	maxPayload = 1024 // the longest reply payload accepted (a refusal's text)
)

// Message kinds.
const (
	kindHello   byte = 1
	kindID      byte = 2
	kindRefused byte = 3
	kindAck     byte = 4
)

// ProtocolError says that what answered (or called) does not speak this
// protocol, or broke it.
type ProtocolError struct{ Reason string }

// Error says what broke the protocol.
func (e *ProtocolError) Error() string { return "rendezvous protocol: " + e.Reason }

func header(kind byte) []byte {
	return append([]byte(magic), Version, kind)
}

func appendU32(b []byte, v int) []byte { return binary.BigEndian.AppendUint32(b, uint32(v)) }

// checkHeader checks the magic and returns the version and kind.
func checkHeader(h []byte) (version, kind byte, err error) {
	if string(h[:len(magic)]) != magic {
		return 0, 0, &ProtocolError{Reason: fmt.Sprintf("bad magic %q", h[:len(magic)])}
	}
	return h[len(magic)], h[len(magic)+1], nil
}

func encodeHello(rank, world int) []byte { return appendU32(appendU32(header(kindHello), rank), world) }

// readHello reads a hello. A wrong version is returned with the numbers
// read, so rank 0 can say so to the caller.
func readHello(r io.Reader) (version byte, rank, world int, err error) {
	b := make([]byte, helloLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, 0, 0, err
	}
	version, kind, err := checkHeader(b)
	if err != nil {
		return 0, 0, 0, err
	}
	if kind != kindHello {
		return 0, 0, 0, &ProtocolError{Reason: fmt.Sprintf("message kind %d where a hello (%d) belongs", kind, kindHello)}
	}
	rank = int(binary.BigEndian.Uint32(b[headerLen:]))
	world = int(binary.BigEndian.Uint32(b[headerLen+4:]))
	return version, rank, world, nil
}

func encodeReply(kind byte, payload []byte) []byte {
	b := binary.BigEndian.AppendUint16(header(kind), uint16(len(payload)))
	return append(b, payload...)
}

// readReply reads rank 0's reply: the id, or a refusal's text.
func readReply(r io.Reader) (id driver.CommID, refused string, err error) {
	h := make([]byte, headerLen+2)
	if _, err := io.ReadFull(r, h); err != nil {
		return id, "", err
	}
	version, kind, err := checkHeader(h)
	if err != nil {
		return id, "", err
	}
	if version != Version {
		return id, "", &ProtocolError{Reason: fmt.Sprintf("rank 0 speaks protocol version %d, this rank %d", version, Version)}
	}
	n := int(binary.BigEndian.Uint16(h[headerLen:]))
	switch {
	case kind == kindID && n != IDLen:
		return id, "", &ProtocolError{Reason: fmt.Sprintf("an id of %d bytes, want %d", n, IDLen)}
	case kind == kindRefused && (n == 0 || n > maxPayload):
		return id, "", &ProtocolError{Reason: fmt.Sprintf("a refusal of %d bytes, want 1 to %d", n, maxPayload)}
	case kind != kindID && kind != kindRefused:
		return id, "", &ProtocolError{Reason: fmt.Sprintf("message kind %d where a reply belongs", kind)}
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return id, "", err
	}
	if kind == kindRefused {
		return id, string(p), nil
	}
	copy(id[:], p)
	return id, "", nil
}

func encodeAck(rank int) []byte { return appendU32(header(kindAck), rank) }

// readAck reads a rank's confirmation that it holds the id.
func readAck(r io.Reader, rank int) error {
	b := make([]byte, ackLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	version, kind, err := checkHeader(b)
	if err != nil {
		return err
	}
	if got := int(binary.BigEndian.Uint32(b[headerLen:])); version != Version || kind != kindAck || got != rank {
		return &ProtocolError{Reason: fmt.Sprintf("ack version %d kind %d rank %d, want %d, %d, %d", version, kind, got, Version, kindAck, rank)}
	}
	return nil
}
