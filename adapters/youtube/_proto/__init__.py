"""Message stubs for ``liveChatMessages.streamList``, generated from Google's published proto.

Why they are committed: the runtime then needs only ``grpcio`` and ``protobuf``, not the protoc
compiler. ``stream_list.proto`` is the vendored source (its header says where it comes from);
``stream_list_pb2.py`` and ``.pyi`` are protoc's output, untouched (ruff skips them).
``make proto`` regenerates them (generate.py), and tests/test_youtube_proto.py fails when the
committed files differ from what the proto compiles to. No service stub is generated: the one
method is called through grpc's generic ``unary_stream`` (stream_list.py).
"""
