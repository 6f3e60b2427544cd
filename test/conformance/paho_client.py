#!/usr/bin/python3
"""An independent MQTT client for test/conformance/paho.test.ts: Debian's python3-paho-mqtt (1.6.1), a parser and
state machine that share no code with Switchyard or mqtt.js.

    /usr/bin/python3 paho_client.py PORT SCENARIO

runs one scenario against the broker on 127.0.0.1:PORT and prints one JSON object: what the paho client observed
(CONNACK codes and flags, messages received, acknowledgements completed, disconnect reasons). The node:test side
asserts on it; this script decides nothing. Exit code 0 when the scenario ran (whatever it observed), 1 when it
could not (an exception: printed as {"error": ...}).
"""
import json
import queue
import socket
import sys
import threading
import time
import traceback

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCodes

HOST = "127.0.0.1"
PORT = int(sys.argv[1])
WAIT = 10.0  # seconds for anything that should happen; generous for a loaded CI machine


class Client:
    """A paho client on its network thread, with what it observed kept for the report."""

    def __init__(self, client_id, v5, clean=True, expiry=None, will=None, topic_alias_maximum=None, v31=False):
        self.v5 = v5
        self.clean = clean
        self.expiry = expiry
        self.topic_alias_maximum = topic_alias_maximum
        if v5:
            self.c = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5)
        else:
            self.c = mqtt.Client(client_id=client_id, clean_session=clean, protocol=mqtt.MQTTv31 if v31 else mqtt.MQTTv311)
        if will is not None:
            self.c.will_set(will["topic"], will["payload"], qos=will.get("qos", 0), retain=will.get("retain", False))
        self.messages = queue.Queue()
        self.connack = None
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.disconnect_rc = None
        self.acked = {}
        self.acked_lock = threading.Lock()
        self.subacks = {}
        self.c.on_connect = self._on_connect
        self.c.on_disconnect = self._on_disconnect
        self.c.on_message = self._on_message
        self.c.on_publish = self._on_publish
        self.c.on_subscribe = self._on_subscribe

    # callbacks: paho 1.6.1 passes `properties` in MQTT 5 only
    def _on_connect(self, c, userdata, flags, rc, properties=None):
        self.connack = {
            "rc": rc.value if hasattr(rc, "value") else rc,
            "sessionPresent": bool(flags.get("session present", 0)),
            "properties": props_dict(properties),
        }
        self.connected.set()

    def _on_disconnect(self, c, userdata, rc, properties=None):
        self.disconnect_rc = rc.value if hasattr(rc, "value") else rc
        self.disconnected.set()

    def _on_message(self, c, userdata, m):
        self.messages.put({"topic": m.topic, "payload": m.payload.decode("utf-8", "replace"), "qos": m.qos, "retain": bool(m.retain)})

    def _on_publish(self, c, userdata, mid):
        with self.acked_lock:
            ev = self.acked.setdefault(mid, threading.Event())
        ev.set()

    def _on_subscribe(self, c, userdata, mid, granted, properties=None):
        self.subacks[mid] = [g.value if hasattr(g, "value") else g for g in granted]

    def connect(self):
        if self.v5:
            props = Properties(PacketTypes.CONNECT)
            if self.expiry is not None:
                props.SessionExpiryInterval = self.expiry
            if self.topic_alias_maximum is not None:
                props.TopicAliasMaximum = self.topic_alias_maximum
            self.c.connect(HOST, PORT, 30, clean_start=self.clean, properties=props)
        else:
            self.c.connect(HOST, PORT, 30)
        self.c.loop_start()
        if not self.connected.wait(WAIT):
            raise RuntimeError("no CONNACK")
        return self.connack

    def subscribe(self, topic, qos):
        rc, mid = self.c.subscribe(topic, qos)
        end = time.time() + WAIT
        while mid not in self.subacks:
            if time.time() > end:
                raise RuntimeError("no SUBACK for " + topic)
            time.sleep(0.01)
        return self.subacks[mid]

    def publish(self, topic, payload, qos=0, retain=False, properties=None):
        """Publishes and, for QoS 1 and 2, waits for the flow to complete (PUBACK, or PUBREC/PUBREL/PUBCOMP)."""
        info = self.c.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        if qos == 0:
            return True
        with self.acked_lock:
            ev = self.acked.setdefault(info.mid, threading.Event())
        return ev.wait(WAIT)

    def receive(self, n, timeout=WAIT):
        out = []
        end = time.time() + timeout
        while len(out) < n:
            left = end - time.time()
            if left <= 0:
                break
            try:
                out.append(self.messages.get(timeout=left))
            except queue.Empty:
                break
        return out

    def until(self, payload):
        """Every message before the one with `payload` (a probe published after what must, or must not, arrive)."""
        seen = []
        end = time.time() + WAIT
        while time.time() < end:
            try:
                m = self.messages.get(timeout=max(0.01, end - time.time()))
            except queue.Empty:
                break
            if m["payload"] == payload:
                return seen
            seen.append(m)
        raise RuntimeError("probe %r never arrived; got %r" % (payload, seen))

    def disconnect(self, reasoncode=None):
        self.c.disconnect(reasoncode=reasoncode) if self.v5 else self.c.disconnect()
        self.disconnected.wait(WAIT)
        self.c.loop_stop()

    def drop(self):
        """Closes the socket without DISCONNECT (a network failure as the broker sees it)."""
        self.c.loop_stop()
        sock = self.c.socket()
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def wait_disconnected(self):
        self.disconnected.wait(WAIT)
        self.c.loop_stop()
        return self.disconnect_rc


def props_dict(p):
    if p is None:
        return {}
    out = {}
    for name in p.names:
        attr = name.replace(" ", "")
        if hasattr(p, attr):
            v = getattr(p, attr)
            out[attr] = v if isinstance(v, (int, str, list)) else str(v)
    return out


def version(name):
    return name.endswith("5")


# --------------------------------------------------------------------------------------------------------------
# scenarios: each returns a dict of observations


def connect(v5):
    tag = "5" if v5 else "311"
    a = Client("paho-connect-" + tag, v5)
    first = a.connect()
    a.disconnect()
    # an empty client id with a clean session: accepted; in MQTT 5 the server assigns one [MQTT-3.2.2-16]
    b = Client("", v5)
    empty = b.connect()
    b.disconnect()
    return {"connack": first, "emptyClientId": empty}


def connect31():
    """MQTT 3.1 (protocol level 3, "MQIsdp"): connect, a QoS 1 round trip, a session resumed with clean session 0;
    3.1's CONNACK has no session-present bit (its first byte is reserved, 0)."""
    topic = "paho/v31"
    a = Client("paho-v31", False, clean=False, v31=True)
    first = a.connect()
    granted = a.subscribe(topic, 1)
    own = a.publish(topic, "own", qos=1)
    own_msg = a.receive(1)
    a.disconnect()
    pub = Client("paho-v31-pub", False)
    pub.connect()
    for i in range(2):
        pub.publish(topic, "queued%d" % i, qos=1)
    pub.disconnect()
    b = Client("paho-v31", False, clean=False, v31=True)
    resumed = b.connect()
    queued = b.receive(2)
    b.disconnect()
    c = Client("paho-v31", False, clean=True, v31=True)
    c.connect()
    c.disconnect()
    return {"first": first, "granted": granted, "own": own, "ownMessage": own_msg, "resumed": resumed, "queued": queued}


def qos_flow(v5, qos):
    tag = "%s-q%d" % ("5" if v5 else "311", qos)
    topic = "paho/qos/" + tag
    sub = Client("paho-sub-" + tag, v5)
    sub.connect()
    granted = sub.subscribe(topic, qos)
    pub = Client("paho-pub-" + tag, v5)
    pub.connect()
    completed = [pub.publish(topic, "m%d" % i, qos=qos) for i in range(5)]
    received = sub.receive(5)
    pub.disconnect()
    sub.disconnect()
    return {"granted": granted, "completed": completed, "received": received}


def retained(v5):
    tag = "5" if v5 else "311"
    topic = "paho/retained/" + tag
    pub = Client("paho-rpub-" + tag, v5)
    pub.connect()
    stored = pub.publish(topic, "kept", qos=1, retain=True)
    s1 = Client("paho-rsub1-" + tag, v5)
    s1.connect()
    s1.subscribe(topic, 1)
    first = s1.receive(1)
    # a retained message with an empty payload removes it [MQTT-3.3.1-10]
    cleared = pub.publish(topic, "", qos=1, retain=True)
    # the clearing message itself goes to the existing subscriber (with retain 0, it is a live message) [MQTT-3.3.1-9]
    live = s1.receive(1)
    s2 = Client("paho-rsub2-" + tag, v5)
    s2.connect()
    s2.subscribe(topic, 1)
    pub.publish(topic, "probe", qos=1)
    after_clear = s2.until("probe")
    for c in (pub, s1, s2):
        c.disconnect()
    return {"stored": stored, "first": first, "cleared": cleared, "live": live, "afterClear": after_clear}


def will(v5):
    tag = "5" if v5 else "311"
    topic = "paho/will/" + tag
    watcher = Client("paho-wwatch-" + tag, v5)
    watcher.connect()
    watcher.subscribe(topic + "/#", 1)
    # a dropped connection publishes the will [MQTT-3.1.2-8]
    dropped = Client("paho-wdrop-" + tag, v5, will={"topic": topic + "/dropped", "payload": "gone", "qos": 1})
    dropped.connect()
    dropped.drop()
    on_drop = watcher.receive(1)
    # a normal DISCONNECT deletes it [MQTT-3.1.2-10]; paho sends MQTT 5's short forms E0 00 and E0 01 00
    normal = []
    for i, rc in enumerate([None, ReasonCodes(PacketTypes.DISCONNECT, "Normal disconnection")] if v5 else [None]):
        n = Client("paho-wnormal-%s-%d" % (tag, i), v5, will={"topic": topic + "/normal", "payload": "unexpected", "qos": 1})
        n.connect()
        n.disconnect(reasoncode=rc)
        normal.append(n.disconnect_rc)
    # the broker may still be closing those sockets: give it a moment before the probe (an absence can only pass late)
    time.sleep(1.0)
    watcher.publish(topic + "/probe", "probe", qos=1)
    after_normal = watcher.until("probe")
    watcher.disconnect()
    return {"onDrop": on_drop, "normalDisconnects": normal, "afterNormal": after_normal}


def session(v5):
    tag = "5" if v5 else "311"
    topic = "paho/session/" + tag
    cid = "paho-session-" + tag
    kw = {"expiry": 300} if v5 else {}
    s = Client(cid, v5, clean=False, **kw)
    first = s.connect()
    s.subscribe(topic, 1)
    s.disconnect()
    pub = Client("paho-spub-" + tag, v5)
    pub.connect()
    for i in range(3):
        pub.publish(topic, "queued%d" % i, qos=1)
    back = Client(cid, v5, clean=False, **kw)
    resumed = back.connect()
    queued = back.receive(3)
    back.disconnect()
    # a clean session / Clean Start 1 discards it
    fresh = Client(cid, v5, clean=True)
    cleaned = fresh.connect()
    fresh.disconnect()
    out = {"first": first, "resumed": resumed, "queued": queued, "cleaned": cleaned}
    if v5:
        # Session Expiry Interval 0 (the default): the session ends with the connection [MQTT-3.1.2-23]
        z = Client(cid + "-zero", v5, clean=False, expiry=0)
        z.connect()
        z.subscribe(topic, 1)
        z.disconnect()
        pub.publish(topic, "lost", qos=1)
        z2 = Client(cid + "-zero", v5, clean=False, expiry=0)
        out["zeroExpiry"] = z2.connect()
        out["zeroExpiryQueued"] = z2.receive(1, timeout=1.0)
        z2.disconnect()
        # a short interval ends the session once it has passed
        e = Client(cid + "-short", v5, clean=False, expiry=1)
        e.connect()
        e.subscribe(topic, 1)
        e.disconnect()
        time.sleep(3.0)
        e2 = Client(cid + "-short", v5, clean=False, expiry=1)
        out["afterExpiry"] = e2.connect()
        e2.disconnect()
    pub.disconnect()
    return out


def topic_alias(v5):
    topic = "paho/alias"
    sub = Client("paho-asub", True)  # announces no Topic Alias Maximum: must get full topic names [MQTT-3.3.2-11]
    sub.connect()
    sub.subscribe(topic + "/#", 1)
    pub = Client("paho-apub", True)
    connack = pub.connect()
    sent = []
    for t, payload in [(topic + "/a", "a1"), ("", "a2"), (topic + "/b", "b1"), ("", "b2")]:
        props = Properties(PacketTypes.PUBLISH)
        props.TopicAlias = 1
        sent.append(pub.publish(t, payload, qos=1, properties=props))
    received = sub.receive(4)
    pub.disconnect()
    # an alias above the server's Topic Alias Maximum: DISCONNECT 0x94 [MQTT-3.3.2-9]
    maximum = connack["properties"].get("TopicAliasMaximum", 0)
    over = Client("paho-aover", True)
    over.connect()
    props = Properties(PacketTypes.PUBLISH)
    props.TopicAlias = maximum + 1
    over.c.publish(topic + "/c", "over", qos=0, properties=props)
    over_rc = over.wait_disconnected()
    # an alias the client never set, with an empty topic: Protocol Error 0x82 (5 §3.3.2.3.4)
    unknown = Client("paho-aunknown", True)
    unknown.connect()
    props = Properties(PacketTypes.PUBLISH)
    props.TopicAlias = 1
    unknown.c.publish("", "unknown", qos=0, properties=props)
    unknown_rc = unknown.wait_disconnected()
    # a later subscriber probe: nothing from the refused publishes arrived
    pub2 = Client("paho-apub2", True)
    pub2.connect()
    pub2.publish(topic + "/probe", "probe", qos=1)
    leaked = sub.until("probe")
    pub2.disconnect()
    sub.disconnect()
    return {"connack": connack, "sent": sent, "received": received, "overMaximum": over_rc, "unknownAlias": unknown_rc, "leaked": leaked}


SCENARIOS = {
    "connect-311": lambda: connect(False),
    "connect-5": lambda: connect(True),
    "connect-31": connect31,
    "qos1-311": lambda: qos_flow(False, 1),
    "qos1-5": lambda: qos_flow(True, 1),
    "qos2-311": lambda: qos_flow(False, 2),
    "qos2-5": lambda: qos_flow(True, 2),
    "retained-311": lambda: retained(False),
    "retained-5": lambda: retained(True),
    "will-311": lambda: will(False),
    "will-5": lambda: will(True),
    "session-311": lambda: session(False),
    "session-5": lambda: session(True),
    "topic-alias-5": lambda: topic_alias(True),
}

if __name__ == "__main__":
    name = sys.argv[2]
    try:
        result = SCENARIOS[name]()
        print(json.dumps({"scenario": name, "paho": mqtt.__version__ if hasattr(mqtt, "__version__") else "", **result}))
        sys.stdout.flush()
    except Exception as e:  # reported, the node side fails the test with it
        print(json.dumps({"scenario": name, "error": "%s: %s" % (type(e).__name__, e), "trace": traceback.format_exc()}))
        sys.stdout.flush()
        sys.exit(1)
