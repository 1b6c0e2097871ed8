#!/usr/bin/python3
# tests/lib/rls_pb.py - Envoy's rate limit service messages as a real
# protobuf library reads and writes them (Debian's python3-protobuf), for
# tests/test_rls_wire.c: the messages are built at run time from
# descriptors made here, with the field numbers of data-plane-api's
# rls.proto, ratelimit.proto and base.proto and grpc.health.v1 (no
# protoc, no generated files).
#
#   rls_pb.py encode MESSAGE JSON   prints the message's bytes, hex
#   rls_pb.py decode MESSAGE HEX    prints it as JSON (proto field names)
# MESSAGE: request, response, health_request, health_response.
import json
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf import duration_pb2, wrappers_pb2  # noqa: F401 (in the pool)

F = descriptor_pb2.FieldDescriptorProto


def field(name, number, ftype, label=F.LABEL_OPTIONAL, type_name=None):
    f = F(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    return f


def message(name, *fields, nested=(), enums=()):
    m = descriptor_pb2.DescriptorProto(name=name)
    m.field.extend(fields)
    m.nested_type.extend(nested)
    m.enum_type.extend(enums)
    return m


def enum(name, *values):
    e = descriptor_pb2.EnumDescriptorProto(name=name)
    for n, v in values:
        e.value.add(name=n, number=v)
    return e


REP = F.LABEL_REPEATED
S, U32, U64, BYTES, MSG, ENUM = (F.TYPE_STRING, F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_BYTES,
                                 F.TYPE_MESSAGE, F.TYPE_ENUM)
P = ".rlstest."
UNITS = [("UNKNOWN", 0), ("SECOND", 1), ("MINUTE", 2), ("HOUR", 3), ("DAY", 4),
         ("WEEK", 7), ("MONTH", 5), ("YEAR", 6)]

fd = descriptor_pb2.FileDescriptorProto(name="rlstest.proto", package="rlstest", syntax="proto3")
fd.dependency.extend(["google/protobuf/wrappers.proto", "google/protobuf/duration.proto"])
fd.message_type.extend([
    message("Entry", field("key", 1, S), field("value", 2, S)),
    message("Override", field("requests_per_unit", 1, U32), field("unit", 2, ENUM, type_name=P + "RateLimit.Unit")),
    message("Descriptor", field("entries", 1, MSG, REP, P + "Entry"),
            field("limit", 2, MSG, type_name=P + "Override"),
            field("hits_addend", 3, MSG, type_name=".google.protobuf.UInt64Value")),
    message("request", field("domain", 1, S), field("descriptors", 2, MSG, REP, P + "Descriptor"),
            field("hits_addend", 3, U32)),
    message("RateLimit", field("name", 3, S), field("requests_per_unit", 1, U32),
            field("unit", 2, ENUM, type_name=P + "RateLimit.Unit"), enums=[enum("Unit", *UNITS)]),
    message("Status", field("code", 1, ENUM, type_name=P + "response.Code"),
            field("current_limit", 2, MSG, type_name=P + "RateLimit"),
            field("limit_remaining", 3, U32),
            field("duration_until_reset", 4, MSG, type_name=".google.protobuf.Duration")),
    message("HeaderValue", field("key", 1, S), field("value", 2, S)),
    message("response", field("overall_code", 1, ENUM, type_name=P + "response.Code"),
            field("statuses", 2, MSG, REP, P + "Status"),
            field("response_headers_to_add", 3, MSG, REP, P + "HeaderValue"),
            field("request_headers_to_add", 4, MSG, REP, P + "HeaderValue"),
            field("raw_body", 5, BYTES),
            enums=[enum("Code", ("UNKNOWN", 0), ("OK", 1), ("OVER_LIMIT", 2))]),
    message("health_request", field("service", 1, S)),
    message("health_response", field("status", 1, ENUM, type_name=P + "health_response.Serving"),
            enums=[enum("Serving", ("UNKNOWN", 0), ("SERVING", 1), ("NOT_SERVING", 2),
                        ("SERVICE_UNKNOWN", 3))]),
])

pool = descriptor_pool.Default()
pool.Add(fd)
factory = message_factory.MessageFactory(pool)


def cls(name):
    return factory.GetPrototype(pool.FindMessageTypeByName("rlstest." + name))


def main():
    what, name, arg = sys.argv[1], sys.argv[2], sys.argv[3]
    m = cls(name)()
    if what == "encode":
        json_format.ParseDict(json.loads(arg), m)
        print(m.SerializeToString().hex())
    else:
        m.ParseFromString(bytes.fromhex(arg))
        print(json.dumps(json_format.MessageToDict(m, preserving_proto_field_name=True),
                         sort_keys=True))


if __name__ == "__main__":
    main()
