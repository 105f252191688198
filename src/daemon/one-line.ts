/** Stored errors may carry newlines or escapes and run long; a report row is one short line. */
export function oneLine(text: string, max = 200): string {
  const flat = text.replace(/[\u0000-\u001f\u007f]/g, ' ');
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}
