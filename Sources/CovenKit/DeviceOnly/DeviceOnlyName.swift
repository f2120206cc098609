import Foundation

/// The one rule make-device-only writes every name through, on every platform, so a name is
/// valid on any drive (DESIGN.md "Names written by make-device-only").
///
/// - `" * : < > ? \ | /` become their fullwidth forms `＂ ＊ ： ＜ ＞ ？ ＼ ｜ ／`;
/// - control characters U+0000–U+001F become `␀`–`␟` (U+2400–U+241F), DEL becomes `␡` (U+2421);
/// - a Windows device name (CON, PRN, AUX, NUL, COM1–COM9, LPT1–LPT9, any case, with or without
///   an extension) has its first character replaced by its fullwidth form (`ＣON.flac`);
/// - a last `.` becomes `．` (U+FF0E) and a last space `␠` (U+2420);
/// - a name past 255 bytes keeps its extension and is cut before it, at a character boundary,
///   ending in `…`.
///
/// A name that came through a Swift `String` with bytes that are not UTF-8 (see ``PathText``)
/// is first taken as the text `coven_path_text` shows for it (`Caf\xE9.flac`), whose backslash
/// the rule then makes `＼`.
public enum DeviceOnlyName {
    /// The longest name, in bytes, most file systems take.
    public static let maximumBytes = 255

    static let fullwidth: [Unicode.Scalar: Unicode.Scalar] = [
        "\"": "\u{FF02}", "*": "\u{FF0A}", ":": "\u{FF1A}", "<": "\u{FF1C}", ">": "\u{FF1E}",
        "?": "\u{FF1F}", "\\": "\u{FF3C}", "|": "\u{FF5C}", "/": "\u{FF0F}",
    ]

    static let deviceNames: Set<String> = {
        var names: Set<String> = ["CON", "PRN", "AUX", "NUL"]
        for digit in 1...9 {
            names.insert("COM\(digit)")
            names.insert("LPT\(digit)")
        }
        return names
    }()

    /// The name as make-device-only writes it.
    ///
    /// - Parameter name: one name as the app gave it (it may hold a `/`: `AC/DC` is one name).
    /// - Returns: the name to create; the empty string for an empty name (which callers refuse
    ///   as `empty` first).
    public static func written(_ name: String) -> String {
        let given = PathText.text(PathText.osBytes(name))
        var scalars = Array(given.unicodeScalars)
        guard !scalars.isEmpty else { return "" }

        // A Windows device name: judged on the part before the first dot, as Windows does.
        let stem = String(String.UnicodeScalarView(scalars.prefix { $0 != "." }))
        if deviceNames.contains(stem.uppercased()), let first = scalars.first, first.isASCII,
           let wide = Unicode.Scalar(first.value - 0x21 + 0xFF01) {
            scalars[0] = wide
        }

        var out = String.UnicodeScalarView()
        for (index, scalar) in scalars.enumerated() {
            let isLast = index == scalars.count - 1
            if let wide = fullwidth[scalar] {
                out.append(wide)
            } else if scalar.value < 0x20 {
                out.append(Unicode.Scalar(0x2400 + scalar.value)!)
            } else if scalar.value == 0x7F {
                out.append("\u{2421}")
            } else if isLast && scalar == "." {
                out.append("\u{FF0E}")
            } else if isLast && scalar == " " {
                out.append("\u{2420}")
            } else {
                out.append(scalar)
            }
        }
        return shortened(String(out))
    }

    /// A name cut to ``maximumBytes``: its extension kept, the rest cut at a character
    /// boundary and ended with `…`.
    static func shortened(_ name: String) -> String {
        guard name.utf8.count > maximumBytes else { return name }
        let ellipsis = "\u{2026}"
        var stem = Substring(name)
        var ext = Substring("")
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            let candidate = name[dot...]
            // An extension too long to keep beside a cut stem is cut with the rest.
            if candidate.utf8.count + ellipsis.utf8.count < maximumBytes {
                stem = name[..<dot]
                ext = candidate
            }
        }
        let room = maximumBytes - ext.utf8.count - ellipsis.utf8.count
        var kept = ""
        var used = 0
        for character in stem {
            let size = character.utf8.count
            if used + size > room { break }
            kept.append(character)
            used += size
        }
        return kept + ellipsis + ext
    }

    /// The key two written paths clash on: their names joined by `/`, in Unicode normalization
    /// form C, case-folded. Two paths with one key are one path on the default macOS and
    /// Windows volumes.
    ///
    /// - Parameter names: the written names, outermost first.
    public static func clashKey(_ names: [String]) -> String {
        names.map { $0.precomposedStringWithCanonicalMapping.folding(options: [.caseInsensitive], locale: nil).precomposedStringWithCanonicalMapping }
            .joined(separator: "/")
    }
}
