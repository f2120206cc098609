import Foundation
import XCTest

@testable import coven

/// The completion scripts: completions/ is what the binary renders, each script loads in its
/// real shell, and each completes commands, options, choices, paths and file ids the way the
/// parser reads a command line (checked on a registry made for the purpose, with a stand-in
/// `coven` on PATH answering the file-id query).
///
/// The shells come from `make test`'s setup; without one, its tests are skipped, unless
/// `COVEN_REQUIRE_SHELLS=1` (which `make test` sets) makes that a failure.
final class CompletionsTests: XCTestCase {
    private let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"

    /// The shell's path, or a skip (a failure under `COVEN_REQUIRE_SHELLS`).
    private func shell(_ name: String) throws -> String {
        if let found = Processes.which(name, path: path) { return found }
        if ProcessInfo.processInfo.environment["COVEN_REQUIRE_SHELLS"] == "1" {
            throw TestError("\(name) is not installed: run scripts/setup-test-deps.sh")
        }
        throw XCTSkip("\(name) is not installed (make test installs it)")
    }

    // MARK: - The scripts in completions/

    func testCompletionFilesAreCurrent() throws {
        for shell in Completions.Shell.allCases {
            let rendered = try Processes.coven(["completions", shell.rawValue])
            XCTAssertEqual(rendered.status, 0, rendered.stderrText)
            let file = Repository.path("completions/" + shell.fileName)
            let stored = FileManager.default.contents(atPath: file)
            XCTAssertTrue(stored == rendered.stdout, "completions/\(shell.fileName) is stale or missing: run 'make completions'")
        }
    }

    func testBashLoadsTheScript() throws {
        let bash = try shell("bash")
        let result = try run(bash, ["-c", "source completions/coven.bash && complete -p coven"], in: Repository.root.path)
        XCTAssertEqual(result.stdoutText, "complete -F _coven coven\n", result.stderrText)
        XCTAssertEqual(result.stderrText, "")
    }

    func testZshLoadsTheScriptSourcedOrFromFpath() throws {
        let zsh = try shell("zsh")
        let sourced = try run(zsh, ["-fc", "autoload -U compinit; compinit -u -D; source completions/_coven; print -r -- $_comps[coven]"], in: Repository.root.path)
        XCTAssertEqual(sourced.stdoutText, "_coven\n", sourced.stderrText)
        XCTAssertEqual(sourced.stderrText, "")
        let autoloaded = try run(zsh, ["-fc", "fpath=(completions $fpath); autoload -U compinit; compinit -u -D; print -r -- $_comps[coven]"], in: Repository.root.path)
        XCTAssertEqual(autoloaded.stdoutText, "_coven\n", autoloaded.stderrText)
        XCTAssertEqual(try run(zsh, ["-n", "completions/_coven"], in: Repository.root.path).status, 0)
    }

    func testFishLoadsTheScriptAndCompletesCommands() throws {
        let fish = try shell("fish")
        let result = try run(fish, ["-c", "source completions/coven.fish; complete -C'coven comp'; complete -C'coven completions '"], in: Repository.root.path)
        XCTAssertEqual(result.stderrText, "")
        let candidates = result.stdoutText.split(separator: "\n").map { String($0.split(separator: "\t").first ?? "") }
        XCTAssertEqual(candidates, ["completions", "bash", "fish", "zsh"])
    }

    func testRealScriptsCompleteTheShellsOfCompletions() throws {
        let dump = RegistryDump.current()
        let bench = try Bench(dump: dump)
        defer { bench.remove() }
        for shell in try availableShells() {
            XCTAssertEqual(try bench.complete(shell, "coven completions "), ["bash", "fish", "zsh"], shell.rawValue)
            XCTAssertEqual(try bench.complete(shell, "coven --db x.db comp"), ["completions"], shell.rawValue)
        }
    }

    // MARK: - Behaviour, on a registry that has every kind of completion

    /// Commands with choices, a directory option, a repeatable option, a short option with a
    /// value, a file-id argument and a repeating file argument.
    static let sample = RegistryDump(
        name: "coven", version: "9.9.9", globalOptions: GlobalOptions.specs,
        commands: [
            .init(name: "stage", abstract: "stage a file: [app] or 'user'", discussion: "", category: .plumbing,
                  usage: ["coven stage NAMESPACE PATH..."],
                  options: [
                    OptionSpec("place", short: "p", value: "WHERE", help: "where it lives: 'cloud' or [device-only]", choices: ["cloud", "device-only"]),
                    OptionSpec("folder", value: "DIR", help: "a folder", completion: .directory),
                    OptionSpec("param", value: "KEY=VALUE", help: "a parameter", repeatable: true),
                    OptionSpec("null", short: "z", help: "end records with NUL"),
                  ],
                  arguments: [
                    ArgumentSpec("NAMESPACE", help: "the namespace", choices: ["attachments", "thumbnails"]),
                    ArgumentSpec("PATH", help: "the files", repeating: true, completion: .file),
                  ],
                  mutates: true),
            .init(name: "cat", abstract: "print a file", discussion: "", category: .plumbing, usage: ["coven cat FILE"],
                  options: [OptionSpec("offset", short: "o", value: "N", help: "where to start")],
                  arguments: [ArgumentSpec("FILE", help: "the file", completion: .fileID)], mutates: false),
            .init(name: "upload-worker", abstract: "send uploads", discussion: "", category: .porcelain,
                  usage: ["coven upload-worker [--once]"], options: [OptionSpec("once", help: "drain the queue")],
                  arguments: [], mutates: true),
        ])

    /// The line completed, and what each shell must offer.
    static let cases: [(line: String, expected: [String])] = [
        ("coven ", ["cat", "help", "stage", "upload-worker"]),
        ("coven up", ["upload-worker"]),
        ("coven --json st", ["stage"]),
        ("coven stage --place ", ["cloud", "device-only"]),
        ("coven stage -p d", ["device-only"]),
        ("coven stage ", ["attachments", "thumbnails"]),
        ("coven stage --param a=1 -z ", ["attachments", "thumbnails"]),
        ("coven stage -- ", ["attachments", "thumbnails"]),
        ("coven stage attachments ", ["album", "notes.txt", "song.flac"]),
        ("coven stage attachments song.flac no", ["notes.txt"]),
        ("coven stage --folder ", ["album"]),
        ("coven cat ", ["0193a9b2-0000-7000-8000-000000000001", "0193a9b2-0000-7000-8000-000000000002"]),
        ("coven --db /x/dev.db cat 0193a9b2-0000-7000-8000-0000000000", ["0193a9b2-0000-7000-8000-000000000001", "0193a9b2-0000-7000-8000-000000000002"]),
        ("coven cat -o 5 ", ["0193a9b2-0000-7000-8000-000000000001", "0193a9b2-0000-7000-8000-000000000002"]),
        ("coven help ", ["cat", "stage", "upload-worker"]),
        ("coven upload-worker --on", ["--once"]),
    ]

    func testEachShellCompletesLikeTheParserReads() throws {
        let bench = try Bench(dump: Self.sample)
        defer { bench.remove() }
        for shell in try availableShells() {
            for (line, expected) in Self.cases {
                XCTAssertEqual(try bench.complete(shell, line), expected.sorted(), "\(shell.rawValue): '\(line)'")
            }
        }
    }

    func testFileIDsComeFromCovenSqlOnTheNamedDevice() throws {
        let bench = try Bench(dump: Self.sample)
        defer { bench.remove() }
        for shell in try availableShells() {
            try? FileManager.default.removeItem(atPath: bench.log)
            _ = try bench.complete(shell, "coven --db /x/dev.db cat ")
            let calls = (try? String(contentsOfFile: bench.log, encoding: .utf8)) ?? ""
            XCTAssertTrue(calls.contains("sql --db /x/dev.db -z SELECT id FROM coven_files\n"), "\(shell.rawValue) ran: \(calls)")
            try? FileManager.default.removeItem(atPath: bench.log)
            _ = try bench.complete(shell, "coven cat --db=/y/after.db ")
            let after = (try? String(contentsOfFile: bench.log, encoding: .utf8)) ?? ""
            XCTAssertTrue(after.contains("sql --db /y/after.db -z SELECT id FROM coven_files\n"), "\(shell.rawValue) ran: \(after)")
            try? FileManager.default.removeItem(atPath: bench.log)
            _ = try bench.complete(shell, "coven cat ")
            let plain = (try? String(contentsOfFile: bench.log, encoding: .utf8)) ?? ""
            XCTAssertTrue(plain.contains("sql -z SELECT id FROM coven_files\n"), "\(shell.rawValue) ran: \(plain)")
        }
    }

    func testBashJoinsWordsSplitAtEquals() throws {
        let bench = try Bench(dump: Self.sample)
        defer { bench.remove() }
        _ = try shell("bash")
        XCTAssertEqual(try bench.complete(.bash, "coven stage --place="), ["cloud", "device-only"])
        XCTAssertEqual(try bench.complete(.bash, "coven stage --place=c"), ["cloud"])
        XCTAssertEqual(try bench.complete(.bash, "coven stage --place=cloud "), ["attachments", "thumbnails"])
    }

    func testZshSpecsEscapeDescriptions() {
        let script = Completions.render(.zsh, Self.sample)
        XCTAssertTrue(script.contains(#"'(-p --place)'{-p+,--place=}'[where it lives: '\''cloud'\'' or \[device-only\]]:WHERE:(cloud device-only)'"#), script)
        XCTAssertTrue(script.contains(#"'*--param=[a parameter]:KEY=VALUE: '"#))
        XCTAssertTrue(script.contains(#"'*:PATH:_files'"#))
        XCTAssertTrue(script.contains(#"'--folder=[a folder]:DIR:_path_files -/'"#))
    }

    private func availableShells() throws -> [Completions.Shell] {
        let shells = Completions.Shell.allCases.filter { Processes.which($0.rawValue, path: path) != nil }
        if shells.count < Completions.Shell.allCases.count, ProcessInfo.processInfo.environment["COVEN_REQUIRE_SHELLS"] == "1" {
            throw TestError("bash, zsh and fish must all be installed: run scripts/setup-test-deps.sh")
        }
        if shells.isEmpty { throw XCTSkip("no shell installed") }
        return shells
    }

    private func run(_ program: String, _ arguments: [String], in directory: String) throws -> ProcessResult {
        try Processes.run(program, arguments, environment: ["PATH": path, "HOME": NSTemporaryDirectory(), "LANG": "C"],
                          directory: directory, timeout: 60)
    }
}

/// A folder with a registry's three scripts, a few files to complete, and a stand-in `coven`
/// that logs its arguments and prints two file ids, NUL-terminated.
private struct Bench {
    let folder: String
    var log: String { folder + "/coven.log" }

    init(dump: RegistryDump) throws {
        folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("coven-completions-\(UUID().uuidString.prefix(8))").resolvingSymlinksInPath().path
        let manager = FileManager.default
        for sub in ["", "/bin", "/work/album", "/scripts", "/home"] {
            try manager.createDirectory(atPath: folder + sub, withIntermediateDirectories: true)
        }
        for file in ["/work/song.flac", "/work/notes.txt"] { _ = manager.createFile(atPath: folder + file, contents: Data()) }
        for shell in Completions.Shell.allCases {
            try Completions.render(shell, dump).write(toFile: folder + "/scripts/" + shell.fileName, atomically: true, encoding: .utf8)
        }
        let stub = """
            #!/bin/sh
            printf '%s\\n' "$*" >> '\(folder)/coven.log'
            printf '0193a9b2-0000-7000-8000-000000000001\\0'
            printf '0193a9b2-0000-7000-8000-000000000002\\0'

            """
        try stub.write(toFile: folder + "/bin/coven", atomically: true, encoding: .utf8)
        try manager.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder + "/bin/coven")
        try Self.zshInit.write(toFile: folder + "/scripts/init.zsh", atomically: true, encoding: .utf8)
        try Self.zshDriver.write(toFile: folder + "/scripts/drive.zsh", atomically: true, encoding: .utf8)
    }

    func remove() { try? FileManager.default.removeItem(atPath: folder) }

    /// The candidates `shell` offers for `line` (cursor at its end), sorted, a folder's `/` dropped.
    func complete(_ shell: Completions.Shell, _ line: String) throws -> [String] {
        let path = folder + "/bin:" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let environment = ["PATH": path, "HOME": folder + "/home", "LANG": "C", "TERM": "dumb", "ZT_FPATH": folder + "/scripts"]
        let result: ProcessResult
        switch shell {
        case .bash:
            result = try Processes.run("/usr/bin/env", ["bash", "-c", Self.bashDriver, "bash", folder + "/scripts/coven.bash", line],
                                       environment: environment, directory: folder + "/work", timeout: 60)
        case .zsh:
            result = try Processes.run("/usr/bin/env", ["zsh", "-f", folder + "/scripts/drive.zsh", folder + "/scripts/init.zsh", line],
                                       environment: environment, directory: folder + "/work", timeout: 60)
        case .fish:
            result = try Processes.run("/usr/bin/env", ["fish", "--no-config", "-c", "source $argv[1]; complete -C$argv[2]", folder + "/scripts/coven.fish", line],
                                       environment: environment, directory: folder + "/work", timeout: 60)
        }
        guard result.status == 0, !result.timedOut else {
            throw TestError("\(shell.rawValue) failed on '\(line)' (status \(result.status)): \(result.stderrText)")
        }
        let candidates = result.stdoutText.split(separator: "\n").map { line -> String in
            var candidate = String(line.split(separator: "\t", omittingEmptySubsequences: false).first ?? "")
            if candidate.hasSuffix("/") { candidate.removeLast() }
            return candidate
        }
        return Array(Set(candidates.filter { !$0.isEmpty })).sorted()
    }

    /// Sets the completion variables as bash would for a line typed at the prompt (splitting
    /// at `=`, one of COMP_WORDBREAKS) and prints COMPREPLY.
    static let bashDriver = #"""
    source "$1"
    line=$2
    COMP_LINE=$line
    COMP_POINT=${#line}
    read -ra COMP_WORDS <<< "${line//=/ = }"
    [[ $line == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    _coven
    printf '%s\n' "${COMPREPLY[@]}"
    """#

    /// Runs in an interactive zsh inside a pseudo-terminal: loads the script through compinit
    /// and wraps compadd to print every candidate between two marks.
    static let zshInit = #"""
    PS1='' PROMPT='' RPROMPT=''
    fpath=($ZT_FPATH $fpath)
    autoload -U compinit && compinit -u -D
    bindkey '^I' complete-word
    zstyle ':completion:*' list-grouped false
    zstyle ':completion:*' insert-tab false
    __zt_mark() { print -rn -- $'\n@@MARK@@\n' }
    compprefuncs=(__zt_mark)
    comppostfuncs=(__zt_mark exit)
    compadd() {
        if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi
        local -a __zt_hits
        builtin compadd -A __zt_hits "$@"
        local __zt_hit
        for __zt_hit in $__zt_hits; do print -rn -- $'\n@@HIT@@'$__zt_hit; done
    }
    print -r -- '@@READY@@'
    """#

    /// Types the line and a tab into that zsh and prints the candidates.
    static let zshDriver = #"""
    zmodload zsh/zpty
    zpty z zsh -f -i
    zpty -w z "source ${(q)1}"
    local line
    while zpty -r z line; do [[ $line == *@@READY@@* ]] && break; done
    zpty -w -n z "$2"$'\t'
    integer marks=0
    while zpty -r z line; do
        [[ $line == *@@MARK@@* ]] && { (( ++marks == 2 )) && break; continue }
        [[ $line == *@@HIT@@* ]] && print -r -- "${${line##*@@HIT@@}%%$'\r'*}"
    done
    zpty -d z
    """#
}
