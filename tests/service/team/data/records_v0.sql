BEGIN TRANSACTION;
CREATE TABLE confirmations (
    id TEXT PRIMARY KEY, created TEXT, fix TEXT, note TEXT, source TEXT
);
INSERT INTO "confirmations" VALUES('old-confirmed','2026-12-01T17:28:01+00:00','{"flags": {"--speculative-eagle-topk": "1"}, "rank": 1}','worked','slack');
INSERT INTO "confirmations" VALUES('old-encoded','2026-12-01T17:28:01+00:00','{"rank": 1}','also','api');
CREATE TABLE triages (
    id TEXT PRIMARY KEY, created TEXT, request TEXT, result TEXT
);
INSERT INTO "triages" VALUES('old-confirmed','2026-12-01T17:28:01+00:00','{"options": {"release": "0.5.11"}, "log": "boom"}','{"location": {"path": "sglang/srt/server_args.py", "function": "ServerArgs._handle_speculative_decoding", "start_line": 3519, "end_line": 3522}, "release": {"release": "0.5.11"}, "summary": "ServerArgs._handle_speculative_decoding refused", "fixes": [{"rank": 1, "command": "fix"}]}');
INSERT INTO "triages" VALUES('old-encoded','2026-12-01T17:28:01+00:00','{"options": {}}','{"location": {"path": "sglang/srt/server_args.py", "function": "ServerArgs._handle_speculative_decoding", "start_line": 3519, "end_line": 3522}, "release": {"release": "0.5.9"}, "summary": "ServerArgs._handle_speculative_decoding refused", "fixes": [{"rank": 1, "command": "fix"}]}');
INSERT INTO "triages" VALUES('old-other','2026-12-01T17:28:01+00:00','{"options": {}}','{"location": {"path": "sglang/srt/server_args.py", "function": "ServerArgs.check", "start_line": 3519, "end_line": 3522}, "release": {"release": "0.5.11"}, "summary": "ServerArgs.check refused", "fixes": [{"rank": 1, "command": "fix"}]}');
INSERT INTO "triages" VALUES('old-plain','2026-12-01T17:28:01+00:00','{"options": {}}','{"summary": "no location"}');
INSERT INTO "triages" VALUES('old-junk','2026-12-01T17:28:01+00:00','{}','not JSON at all');
COMMIT;
