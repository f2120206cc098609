import Foundation

/// The fixed environment every golden step runs in (Tests/golden/README.md, "Environment").
enum GoldenEnvironment {
    /// Variables passed through from the test process when set there: what an S3 case needs to
    /// reach the loopback server the tests started (a case checks them with `[env:NAME]`).
    static let passedThrough = [
        "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "COVEN_TEST_S3_URL",
    ]

    /// The environment for a case whose temporary folder is `work`.
    ///
    /// `PATH` starts with the folder holding the coven under test, so `exec sh -c 'coven …'`
    /// runs the same binary. `COVEN_DB` is unset unless the case sets it with `env`.
    static func make(work: String, binary: String) -> [String: String] {
        let parent = ProcessInfo.processInfo.environment
        var environment: [String: String] = [
            "WORK": work,
            "HOME": work + "/home",
            "XDG_DATA_HOME": work + "/home/.local/share",
            "XDG_CONFIG_HOME": work + "/home/.config",
            "TMPDIR": work + "/tmp",
            "LANG": "C",
            "LC_ALL": "C",
            "TZ": "UTC",
            "NO_COLOR": "1",
            "COLUMNS": "80",
            "TERM": "dumb",
            // The login name: the default name of a store's first member ('coven init').
            "LOGNAME": "alice",
            "USER": "alice",
            "PATH": (binary as NSString).deletingLastPathComponent + ":" + (parent["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"),
        ]
        for name in passedThrough {
            if let value = parent[name] { environment[name] = value }
        }
        return environment
    }
}

/// The rewrites applied to every step's stdout and stderr before comparing
/// (Tests/golden/README.md, "Normalization"), plus the case's own `normalize` lines.
struct GoldenNormalizer {
    /// One rewrite: a regular expression and its replacement template (`$1` for a group).
    struct Rule {
        var pattern: NSRegularExpression
        var template: String
    }

    /// The global rules, in order: object names before ids (the name follows a device id),
    /// then ids, then times.
    static let globalRules: [Rule] = [
        rule(#"(files/[^/\s]+/)[a-z2-7]{26}(?![a-z2-7])"#, "$1<name>"),
        rule(#"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"#, "<id>"),
        rule(#"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?"#, "<time>"),
        rule(#"coven1[02-9ac-hj-np-z]{90,}"#, "<recipient>"),
        rule(#"COVEN-MEMBER-SECRET-1[02-9AC-HJ-NP-Z]{50,}"#, "<secret>"),
    ]

    /// The named rules a case may turn on with `normalize NAME`.
    static let namedRules: [String: Rule] = [
        "sha256": rule(#"\b[0-9a-f]{64}\b"#, "<sha256>"),
    ]

    /// The temporary folder's paths (as given and resolved), replaced by `$WORK`.
    var workPaths: [String]
    /// The case's own rules, applied after the global ones.
    var caseRules: [Rule] = []

    /// `bytes` normalized; in output that is not UTF-8 (a path's own bytes) only the folder's
    /// paths are replaced, byte for byte.
    func apply(_ bytes: [UInt8]) -> [UInt8] {
        guard var text = String(validating: bytes, as: UTF8.self) else {
            var out = bytes
            for path in workPaths.sorted(by: { $0.count > $1.count }) where !path.isEmpty {
                out = Self.replacing(Array(path.utf8), with: Array("$WORK".utf8), in: out)
            }
            return out
        }
        for path in workPaths.sorted(by: { $0.count > $1.count }) where !path.isEmpty {
            text = text.replacingOccurrences(of: path, with: "$WORK")
        }
        for rule in Self.globalRules + caseRules {
            let range = NSRange(text.startIndex..., in: text)
            text = rule.pattern.stringByReplacingMatches(in: text, range: range, withTemplate: rule.template)
        }
        return Array(text.utf8)
    }

    /// `bytes` with every occurrence of `old` replaced by `new`.
    static func replacing(_ old: [UInt8], with new: [UInt8], in bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if index + old.count <= bytes.count, bytes[index..<index + old.count].elementsEqual(old) {
                out += new
                index += old.count
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return out
    }

    /// A rule from a pattern known to compile.
    private static func rule(_ pattern: String, _ template: String) -> Rule {
        // swift-format-ignore: NeverUseForceTry — the patterns above are constants known to compile.
        Rule(pattern: try! NSRegularExpression(pattern: pattern), template: template)
    }

    /// A case's `normalize 'REGEX' 'REPLACEMENT'`.
    static func caseRule(_ pattern: String, _ template: String) throws -> Rule {
        Rule(pattern: try NSRegularExpression(pattern: pattern), template: template)
    }
}
