/** This client's version (the server's). */
export const VERSION = "0.1.0";
