import Foundation

/// Device names: which a device may take (``check(_:)``), and how text output prints one
/// (``escape(_:)``: a control character left by an older coven, or a backslash, printed as an
/// escape, `\t`, `\n`, `\\`, `\xNN`, so one name stays on one line and field).
public enum DeviceNameText {
    /// Refuses a device name that is empty or holds a control character (a newline or tab
    /// would break every line-based listing of devices).
    ///
    /// - Throws: `.usage`.
    public static func check(_ name: String) throws {
        guard !name.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw CovenError(.usage, "--name takes a name, not an empty word", hint: "leave --name out to use the host name")
        }
        if let bad = name.unicodeScalars.first(where: { $0.properties.generalCategory == .control }) {
            throw CovenError(.usage, "a device name cannot hold a control character (\(DeviceNameText.escape(String(bad))) in '\(DeviceNameText.escape(name))')",
                             hint: "pass a name of letters, digits, spaces and punctuation with --name", details: ["name": name])
        }
    }

    /// `name` as text output prints it.
    public static func escape(_ name: String) -> String {
        var text = ""
        for scalar in name.unicodeScalars {
            switch scalar {
            case "\\": text += "\\\\"
            case "\t": text += "\\t"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            default:
                if scalar.properties.generalCategory == .control {
                    text += scalar.value < 0x100 ? String(format: "\\x%02x", scalar.value) : String(format: "\\u{%x}", scalar.value)
                } else {
                    text.unicodeScalars.append(scalar)
                }
            }
        }
        return text
    }
}
