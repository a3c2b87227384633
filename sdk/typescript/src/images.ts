// Figures in results (the python tool's PNG outputs) as image parts for the
// model, with the daemon's dialect rules (docs/dialects.md "Images"): the JSON
// the model reads holds a note in place of each image's base64, at most
// MAX_IMAGES of MAX_IMAGE_BYTES each are attached, the rest stay notes.

export const PNG = "image/png";
/** Decoded bytes: 3.75 MB is 5 MB of base64 (what Anthropic takes per image). */
export const MAX_IMAGE_BYTES = 3_750_000;
export const MAX_IMAGES = 8;

/** A result as the model is shown it: its JSON with notes, and the base64 PNGs to attach. */
export interface ResultParts {
  payload: Record<string, unknown>;
  images: string[];
}

interface Png {
  type: typeof PNG;
  data: string;
}

const isPng = (item: unknown): item is Png =>
  typeof item === "object" &&
  item !== null &&
  (item as { type?: unknown }).type === PNG &&
  typeof (item as { data?: unknown }).data === "string";

function outputsOf(payload: Record<string, unknown>): unknown[] {
  const output = payload.output as { outputs?: unknown } | undefined;
  return Array.isArray(output?.outputs) ? (output.outputs as unknown[]) : [];
}

/** Splits the PNGs out of a payload `{ok, output, error}` (the payload itself when it has none). */
export function splitImages(payload: Record<string, unknown>): ResultParts {
  if (!outputsOf(payload).some(isPng)) return { payload, images: [] };
  const copy = structuredClone(payload);
  const images: string[] = [];
  for (const item of outputsOf(copy).filter(isPng)) {
    const data = item.data;
    const size = Math.floor((data.length * 3) / 4) - (data.slice(-2).match(/=/g)?.length ?? 0);
    if (size <= MAX_IMAGE_BYTES && images.length < MAX_IMAGES) {
      images.push(data);
      item.data = `[PNG image, ${size} bytes: attached as image ${images.length}]`;
    } else {
      item.data =
        `[PNG image, ${size} bytes: not attached, past the cap of ${MAX_IMAGES} images ` +
        `of ${MAX_IMAGE_BYTES} bytes per result; in output_json]`;
    }
  }
  return { payload: copy, images };
}
